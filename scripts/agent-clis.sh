#!/usr/bin/env bash
# Installs the pinned agent CLIs (clients/package.json) once into a cache folder keyed by the
# hash of that file, and prints the folder holding their binaries. Idempotent: a stamp skips the
# work when the pins did not change. clients/npm_clis.py computes the same folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkg="$root/clients/package.json"
command -v npm >/dev/null || { echo "agent-clis: npm is not installed (Node >= 20 needed)" >&2; exit 1; }
key=$(sha256sum "$pkg" | cut -c1-16)
dir=${A2RL_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/a2rl}/npm-$key
stamp="$dir/.a2rl-installed"
mkdir -p "$dir"
# Several installers at once (test workers, a fleet's nodes) take turns; the first installs.
exec 9>"$dir.lock"
flock 9
if [ ! -f "$stamp" ]; then
  cp "$pkg" "$dir/package.json"
  lock="$root/clients/package-lock.json"
  if [ -f "$lock" ]; then
    cp "$lock" "$dir/package-lock.json"
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
  else
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
  fi
  touch "$stamp"
fi
echo "$dir/node_modules/.bin"
