#!/usr/bin/env bash
# Install promtool (Debian's prometheus package), with which the test suite checks the alert
# rules and the dashboard's queries of docs/monitoring/ (tests/config/test_monitoring.py), if it
# is missing. Only the promtool binary is used: no Prometheus server is started.
set -euo pipefail

PROMTOOL=/usr/bin/promtool

if [ -x "${PROMTOOL}" ]; then
    exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
        as_root=(sudo)
    else
        echo "install-promtool: promtool is missing and installing it needs root: run 'sudo $0' once, or 'apt-get install prometheus'." >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
install_prometheus() {
    # policy-rc.d-free: in a container without an init system the package's service does not
    # start; on a host with systemd, it is stopped and disabled again below.
    "${as_root[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
}
if ! install_prometheus 2>/dev/null; then
    "${as_root[@]}" apt-get update -qq
    install_prometheus
fi
if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
    "${as_root[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
fi

[ -x "${PROMTOOL}" ] || { echo "install-promtool: prometheus installed but ${PROMTOOL} is missing" >&2; exit 1; }
echo "install-promtool: $("${PROMTOOL}" --version 2>&1 | head -n 1)"
