#!/usr/bin/env bash
# The README's screenshot of a run page (docs/view-run.png), made by the browser test's own run
# and code path (tests/test_view.py): a real run of the llm agent against a local fake model.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
A2RL_VIEW_SCREENSHOT="$root/docs/view-run.png" "$root/.venv/bin/python" -m pytest \
  "$root/tests/test_view.py" -q -k run_page_shows -p no:cacheprovider
echo "$root/docs/view-run.png"
