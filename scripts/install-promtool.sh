#!/usr/bin/env bash
# Install promtool (Debian's prometheus package), with which the test suite checks the alert
# rules and the dashboard's queries of docs/monitoring/ (tests/config/test_monitoring.py), if it
# is missing. Only the promtool binary is used: no Prometheus server is started.
set -euo pipefail

PROMTOOL=/usr/bin/promtool

if [ -x "${PROMTOOL}" ]; then
    exit 0
fi

bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" install-promtool prometheus
# On a host with systemd the package's own Prometheus service would start: it is not ours.
if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
fi

[ -x "${PROMTOOL}" ] || { echo "install-promtool: prometheus installed but ${PROMTOOL} is missing" >&2; exit 1; }
echo "install-promtool: $("${PROMTOOL}" --version 2>&1 | head -n 1)"
