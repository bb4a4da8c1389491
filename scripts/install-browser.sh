#!/usr/bin/env bash
# Install Debian's Chromium for the end-to-end tests (tests/e2e/), if it is missing.
#
# Playwright drives this browser through its executable path; its own browser download
# (`playwright install`) is never used. Idempotent and silent when /usr/bin/chromium is there.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "${CHROMIUM}" ]; then
    exit 0
fi

bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" install-browser chromium

[ -x "${CHROMIUM}" ] || { echo "install-browser: chromium installed but ${CHROMIUM} is missing" >&2; exit 1; }
echo "install-browser: $("${CHROMIUM}" --version 2>/dev/null)"
