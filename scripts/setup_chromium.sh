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

if [ "$(id -u)" -ne 0 ]; then
  say "chromium is missing; run 'sudo apt-get install chromium' or run make as root"
  exit 1
fi

say "installing Debian's chromium package from the configured mirror (first time: a minute or two)"
export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null

if ! probe; then
  say "chromium was installed but does not answer '--version'; check 'chromium --headless --no-sandbox --version'"
  exit 1
fi
say "chromium ready: $(chromium --version 2>/dev/null || true)"
