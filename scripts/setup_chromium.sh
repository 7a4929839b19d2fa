#!/usr/bin/env bash
# Make sure a headless Chromium is available for the report.html rendering test.
#
# Probe first: when Debian's `chromium` binary is already installed and answers `--version`, do
# nothing (well under a second). Otherwise install Debian's `chromium` package from the configured
# mirror (Playwright's and Puppeteer's browser downloads are not reachable here). Idempotent; safe
# to run from `make setup` every time.
#
# Environment:
#   SPARKBENCH_CHROMIUM   the browser binary to probe (default: chromium on PATH, else /usr/bin/chromium)
set -euo pipefail

say() { printf 'setup-chromium: %s\n' "$*" >&2; }

probe() {
  local bin=${SPARKBENCH_CHROMIUM:-}
  if [ -z "$bin" ]; then
    bin=$(command -v chromium 2>/dev/null || echo /usr/bin/chromium)
  fi
  [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1
}

if probe; then
  exit 0
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib/packages.sh
. "$here/lib/packages.sh"
if ! need_packages say /usr/bin/chromium:chromium /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf:fonts-dejavu-core; then
  say "the report's browser test needs Debian's chromium; install it and retry"
  exit 1
fi

if ! probe; then
  say "chromium was installed but does not answer '--version'; check 'chromium --headless --no-sandbox --version'"
  exit 1
fi
say "chromium ready: $(chromium --version 2>/dev/null || true)"
