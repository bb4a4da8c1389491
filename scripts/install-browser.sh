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

as_root=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
        as_root=(sudo)
    else
        echo "install-browser: Chromium is missing and installing it needs root: run 'sudo $0' once, or 'apt-get install chromium'." >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
install_chromium() {
    "${as_root[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null
}
# The package lists may be missing or stale (a fresh container): update once, then retry.
if ! install_chromium 2>/dev/null; then
    "${as_root[@]}" apt-get update -qq
    install_chromium
fi

[ -x "${CHROMIUM}" ] || { echo "install-browser: chromium installed but ${CHROMIUM} is missing" >&2; exit 1; }
echo "install-browser: $("${CHROMIUM}" --version 2>/dev/null)"
