#!/usr/bin/env bash
# What the SSH test units need on this machine: Debian's openssh-server (sshd) and sudo.
#
# The tests (`ssh` layer, tests/ssh_units.py) start an sshd of their own on 127.0.0.1 with their
# own configuration, host key and users; nothing here starts or enables the system's sshd, and the
# package's own service is kept from starting while it installs (policy-rc.d). Probe first: when
# both are present this does nothing. Idempotent; safe to run from `make setup` every time.
set -euo pipefail

say() { printf 'setup-ssh-units: %s\n' "$*" >&2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib/packages.sh
. "$here/lib/packages.sh"

# The package's own service is kept from starting while it installs (policy-rc.d).
policy=/usr/sbin/policy-rc.d
own_policy=false
if [ "$(id -u)" -eq 0 ] && [ ! -e "$policy" ] && { [ ! -x /usr/sbin/sshd ] || ! command -v sudo >/dev/null 2>&1; }; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  own_policy=true
fi
cleanup() { if $own_policy; then rm -f "$policy"; fi; }
trap cleanup EXIT

if ! need_packages say /usr/sbin/sshd:openssh-server sudo:sudo ssh:openssh-client ssh-keygen:openssh-client; then
  say "the SSH test units (the ssh layer of make test) need these packages; install them and retry"
  exit 1
fi
