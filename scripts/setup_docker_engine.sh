#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine.
#
# Probe first: when `docker info` already works, do nothing (this is the common case and takes
# well under a second). Otherwise install Debian's `docker.io` (and `procps` for pgrep) when they
# are missing (as root; otherwise the `apt-get install` line is named), start `dockerd` in the
# background and wait until it answers. The engine only: each image build checks for what it uses
# itself (scripts/build_base_image.sh: debootstrap). Idempotent; safe to run from `make setup`
# every time.
#
# Environment:
#   SPARKBENCH_DOCKERD_LOG   where dockerd writes its log (default: /var/log/sparkbench-dockerd.log)
#   SPARKBENCH_DOCKER_WAIT_S how long to wait for the engine to answer (default: 60)
set -euo pipefail

log=${SPARKBENCH_DOCKERD_LOG:-/var/log/sparkbench-dockerd.log}
wait_s=${SPARKBENCH_DOCKER_WAIT_S:-60}

say() { printf 'setup-docker: %s\n' "$*" >&2; }

if docker info >/dev/null 2>&1; then
  exit 0
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib/packages.sh
. "$here/lib/packages.sh"
# docker.io with its recommended packages, as Debian installs it.
if ! PKG_APT_FLAGS='' need_packages say dockerd:docker.io docker:docker.io pgrep:procps setsid:util-linux; then
  say "no Docker engine answers; install the packages above, or run make as root"
  exit 1
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    say "dockerd is not running; start it (e.g. 'sudo systemctl start docker') and retry"
    exit 1
  fi
  say "starting dockerd (log: $log)"
  # setsid: the engine must outlive the make process that started it.
  setsid nohup dockerd >"$log" 2>&1 < /dev/null &
fi

for _ in $(seq 1 "$wait_s"); do
  if docker info >/dev/null 2>&1; then
    say "engine ready: $(docker version --format '{{.Server.Version}}' 2>/dev/null)"
    exit 0
  fi
  sleep 1
done
say "the Docker engine did not answer within ${wait_s}s; last lines of $log:"
tail -n 20 "$log" >&2 || true
exit 1
