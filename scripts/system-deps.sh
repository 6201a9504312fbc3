#!/usr/bin/env bash
# Debian packages the tests need: bubblewrap for the local sandbox, Chromium, PostgreSQL.
# Installs only what is missing.
set -euo pipefail
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
# headless Chromium renders the HTML run reports and drives `a2rl view` (Playwright) in the tests
# (not needed by make demo)
[ "${1:-}" = "--optional" ] || command -v chromium >/dev/null || missing+=(chromium)
# PostgreSQL: the store's tests and the fleet's run against a server they start on loopback
# (Debian keeps initdb and pg_ctl under /usr/lib/postgresql/<version>/bin)
[ "${1:-}" = "--optional" ] || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null \
  || missing+=(postgresql)
# compilers for the alfworld extra's sdists (jericho: gcc and make; fast-downward: g++, cmake)
[ "${1:-}" = "--optional" ] || command -v g++ >/dev/null || missing+=(g++)
[ "${1:-}" = "--optional" ] || command -v make >/dev/null || missing+=(make)
[ "${1:-}" = "--optional" ] || command -v cmake >/dev/null || missing+=(cmake)
[ ${#missing[@]} -eq 0 ] && exit 0
# --optional (make demo): the toy task runs without bubblewrap, with a warning.
if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then
  echo "system-deps: please install: ${missing[*]}" >&2
  [ "${1:-}" = "--optional" ] && exit 0
  exit 1
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}"
