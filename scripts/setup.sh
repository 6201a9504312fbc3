#!/usr/bin/env bash
# Creates .venv and installs a2rl with pinned versions. Idempotent: a stamp keyed by the hash
# of the constraints and pyproject skips the work when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
# Extras: `make test` adds alfworld (two C/C++ sdists, about 4 minutes cold); `make demo` does not.
extras=${A2RL_EXTRAS:-dev,docker,fleet}
key=$( (cat constraints.txt pyproject.toml; echo "$extras") | sha256sum | cut -c1-16)
stamp=.venv/.a2rl-setup-$key
if [ -f "$stamp" ]; then exit 0; fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip=(.venv/bin/python -m pip -q --disable-pip-version-check)
# Some pip configurations name index folders that do not exist; their warnings are noise.
exec 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
# Torch first and pinned: an unpinned torch resolves to a multi-GB CUDA build. Without a GPU
# the CPU build is wanted; TORCH_INDEX_URL points pip at a CPU wheel index if the default
# one serves CUDA builds.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  torch_pin=$(grep -i '^torch==' constraints.txt)
  if [ -n "${TORCH_INDEX_URL:-}" ] && ! command -v nvidia-smi >/dev/null; then
    "${pip[@]}" install "$torch_pin" --index-url "$TORCH_INDEX_URL"
  else
    "${pip[@]}" install "$torch_pin"
  fi
fi
"${pip[@]}" install -c constraints.txt -e ".[$extras]"
rm -f .venv/.a2rl-setup-*
touch "$stamp"
echo "setup: .venv ready"
