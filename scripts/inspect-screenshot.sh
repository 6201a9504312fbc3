#!/usr/bin/env bash
# The README's screenshot of `inspect view` on the demo run's Inspect log (docs/inspect-view.png),
# made by the test that exports the demo run (tests/test_demo.py) in its real browser.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
A2RL_INSPECT_SCREENSHOT="$root/docs/inspect-view.png" "$root/.venv/bin/python" -m pytest \
  "$root/tests/test_demo.py" -q -k fields_formats -p no:cacheprovider
echo "$root/docs/inspect-view.png"
