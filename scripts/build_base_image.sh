#!/usr/bin/env bash
# Build the Debian base image that the simulator image (and Molecule's test instances) start from.
#
# No container registry is reachable where sparkbench is tested, so the base image is made from a
# Debian root file system: `debootstrap` from the mirror this machine's apt sources already use
# (read at run time, never written into the repository), then `docker import`.
# Skipped in well under a second when the image already exists. debootstrap is installed when it is
# missing (as root; otherwise the `apt-get install` line is named), whether or not the Docker
# engine was set up by scripts/setup_docker_engine.sh.
#
# Usage: scripts/build_base_image.sh [IMAGE]   (default: sparkbench/debian-base:bookworm)
set -euo pipefail

image=${1:-sparkbench/debian-base:bookworm}
suite=${SPARKBENCH_DEBIAN_SUITE:-bookworm}

say() { printf 'build-base-image: %s\n' "$*" >&2; }
t0=$(date +%s)

if docker image inspect "$image" >/dev/null 2>&1; then
  exit 0
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib/packages.sh
. "$here/lib/packages.sh"
if ! need_packages say debootstrap:debootstrap; then
  say "the base image $image is built from a debootstrap root file system; install debootstrap and retry"
  exit 1
fi

# The first http(s) URI of the main Debian archive in the apt sources (deb822 or one-line form).
mirror=$(
  { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}';
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; break}}';
  } | grep -v -- '-security' | grep -E '^https?://' | head -n 1
) || true
if [ -z "$mirror" ]; then
  say "no Debian mirror found in /etc/apt/sources.list*; set one up for apt first"
  exit 1
fi

rootfs=$(mktemp -d /tmp/sparkbench-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
say "debootstrap $suite (minbase + python3) into $rootfs (about a minute; more on a busy machine)"
debootstrap --variant=minbase --include=python3,ca-certificates "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
  say "debootstrap failed; last lines:"; tail -n 20 "$rootfs.log" >&2; exit 1; }
rm -f "$rootfs.log"
# Keep the image small: no apt lists, docs or caches.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
say "docker import -> $image"
tar -C "$rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
say "done: $image ($(($(date +%s) - t0)) s)"
