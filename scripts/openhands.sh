#!/usr/bin/env bash
# Installs the pinned OpenHands CLI (clients/openhands-requirements.txt, its dependencies held
# at clients/openhands-constraints.txt) into its own virtual environment,
# <cache>/a2rl/openhands-<version>-<hash of both files> (the folder clients/openhands.py looks
# in), and prints its bin folder. Idempotent: a stamp skips the work when it is installed, and
# changing either file installs a fresh copy.
# It needs Python 3.12 (the CLI's Requires-Python): $A2RL_OPENHANDS_PYTHON, else python3.12 on
# PATH, else pyenv's newest 3.12, else the one `uv python find 3.12` knows.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/clients/openhands-requirements.txt"
constraints="$root/clients/openhands-constraints.txt"
version=$(sed -n 's/^openhands==\([0-9A-Za-z.]*\)$/\1/p' "$req")
[ -n "$version" ] || { echo "openhands: $req pins no openhands==VERSION" >&2; exit 1; }
key=$(cat "$req" "$constraints" | sha256sum | cut -c1-16)
dir=${A2RL_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/a2rl}/openhands-$version-$key
stamp="$dir/.a2rl-installed"
is312() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
python=
for candidate in "${A2RL_OPENHANDS_PYTHON:-}" "$(command -v python3.12 2>/dev/null || true)" \
    "$(command -v pyenv >/dev/null && ls -d "$(pyenv root)"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -1)" \
    "$(command -v uv >/dev/null && uv python find 3.12 2>/dev/null)"; do
  if is312 "$candidate"; then python=$candidate; break; fi
done
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ ! -f "$stamp" ]; then
  if [ -z "$python" ]; then
    echo "openhands: the OpenHands CLI needs Python 3.12 and none was found" \
         "(set A2RL_OPENHANDS_PYTHON=/path/to/python3.12, or install one: uv python install 3.12)" >&2
    exit 1
  fi
  rm -rf "$dir"
  "$python" -m venv "$dir"
  # An older pip backtracks for many minutes over the CLI's dependencies; pip 25 resolves them
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "pip>=25" >&2
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" -c "$constraints" >&2
  touch "$stamp"
fi
echo "$dir/bin"
