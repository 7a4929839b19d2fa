#!/usr/bin/env bash
# Make sure the Python that `make venv` uses can create a virtualenv with pip in it.
#
# Debian's python3 creates a venv only with the `python3-venv` package (ensurepip); probe first
# (well under a second when it is there), then install it as root, or name the `apt-get install`
# line otherwise. Idempotent; safe to run from `make venv` every time.
#
# Usage: scripts/setup_python.sh [PYTHON]   (default: python3)
set -euo pipefail

python=${1:-python3}
say() { printf 'setup-python: %s\n' "$*" >&2; }

if ! command -v "$python" >/dev/null 2>&1; then
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  # shellcheck source=scripts/lib/packages.sh
  . "$here/lib/packages.sh"
  need_packages say "$python:python3" || exit 1
fi

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  say "$python is $("$python" -V 2>&1); sparkbench needs Python 3.10 or newer (make PYTHON=python3.11 ...)"
  exit 1
fi

if "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib/packages.sh
. "$here/lib/packages.sh"
minor=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# Debian names it per version (python3.11-venv) and as python3-venv for the default python3.
install_packages say "$python -m venv needs ensurepip" "python${minor}-venv" || exit 1
"$python" -c 'import ensurepip, venv' || { say "$python still lacks ensurepip after the install"; exit 1; }
