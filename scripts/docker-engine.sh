#!/usr/bin/env bash
# A Docker engine for the docker backend's tests: installs docker.io when missing and starts
# the daemon when none answers. Idempotent.
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
if ! command -v dockerd >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq docker.io >/dev/null
fi
if docker info >/dev/null 2>&1; then exit 0; fi
if command -v systemctl >/dev/null && systemctl start docker 2>/dev/null; then :; else
  $SUDO sh -c 'nohup dockerd --host unix:///var/run/docker.sock >/var/log/a2rl-dockerd.log 2>&1 &'
fi
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "docker-engine: the Docker daemon did not start; see /var/log/a2rl-dockerd.log" >&2
exit 1
