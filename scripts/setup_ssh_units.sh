#!/usr/bin/env bash
# What the SSH test units need on this machine: Debian's openssh-server (sshd) and sudo.
#
# The tests (`ssh` layer, tests/ssh_units.py) start an sshd of their own on 127.0.0.1 with their
# own configuration, host key and users; nothing here starts or enables the system's sshd, and the
# package's own service is kept from starting while it installs (policy-rc.d). Probe first: when
# both are present this does nothing. Idempotent; safe to run from `make setup` every time.
set -euo pipefail

say() { printf 'setup-ssh-units: %s\n' "$*" >&2; }

need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v sudo >/dev/null 2>&1 || need+=(sudo)
[ "${#need[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  say "${need[*]} missing: the SSH test units need them; run 'sudo apt-get install ${need[*]}' (the ssh tests skip until then)"
  exit 0
fi

say "installing ${need[*]} from the configured Debian mirror (the system's sshd is not started)"
policy=/usr/sbin/policy-rc.d
own_policy=false
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  own_policy=true
fi
cleanup() { if $own_policy; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
say "ready: $(/usr/sbin/sshd -V 2>&1 | head -n1)"
