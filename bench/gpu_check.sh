#!/usr/bin/env bash
# Every GPU check a2rl needs, in one go (about 5 minutes on one H200; at most 8): the grading
# engines on the Qwen2.5-1.5B shape (random weights from a config, no download): generated
# tok/s, s per GSM8K-sized evaluation, bf16 agreement with plain `generate`, CUDA memory left
# after close(); what `engine_select` picks; one `arith` evaluation through the real grader
# worker on CUDA. Figures: <out>/gpu_check.json, and a summary on stdout. See bench/gpu_check.py.
#
#   bench/gpu_check.sh [--out DIR]      on a GPU machine, from the repository root
#   bench/gpu_check.sh --smoke          tiny shapes on CPU in seconds (tests/test_gpu_check.py)
#   bench/gpu_check.sh --prepare        here, before going to a device machine (see below)
#
# What to carry to a device machine that has torch and transformers but no network, and none
# of pydantic, sqlmodel, SQLAlchemy (nor trl or mcp, which these checks do not import):
#   1. here, once, with network: `bench/gpu_check.sh --prepare` downloads those wheels, for
#      the device's Python (3.12, x86-64 manylinux, pinned as in constraints.txt) into .whl/,
#      a folder git ignores (its own .gitignore), so that it travels only when carried;
#   2. run there from the repository root with `.whl` carried:
#      `bench/gpu_check.sh --out "$OUT"`. The script installs .whl/*.whl and a2rl itself
#      (from this working tree, no build isolation, no index) into a private folder that goes
#      first on PYTHONPATH, so the machine's own packages are left as they are.
# Without --out the figures go to $OUT when set, else to bench/gpu_check_out/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
WHEELS=(pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
        sqlmodel==0.0.50 SQLAlchemy==2.1.9)

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p .whl
  echo "*" > .whl/.gitignore  # ignored by git without touching its metadata: carry it
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}"
  ls -1 .whl
  exit 0
fi

# A machine without our packages: install the carried wheels and a2rl into a private folder.
if ! "$PY" -c "import pydantic, sqlmodel, a2rl.grading" 2>/dev/null; then
  if ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "pydantic/sqlmodel/a2rl are missing and no .whl/ was carried:" \
         "run bench/gpu_check.sh --prepare where there is network, and carry .whl" >&2
    exit 2
  fi
  SITE=$(mktemp -d /tmp/a2rl-gpu-check-site.XXXXXX)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    .whl/*.whl
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
    --target "$SITE" .
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi

ARGS=("$@")
if [[ " ${ARGS[*]:-} " != *" --out "* ]]; then
  ARGS+=(--out "${OUT:-bench/gpu_check_out}")
fi
export PYTHONUNBUFFERED=1
exec "$PY" bench/gpu_check.py "${ARGS[@]}"
