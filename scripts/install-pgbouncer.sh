#!/usr/bin/env bash
# Install Debian's PgBouncer (at least 1.21) if it is missing: the connection pooler the test
# suite runs the API and worker through (tests/config/test_pgbouncer.py, scripts/pgbouncer.sh).
#
# 1.21 is the first release that keeps protocol-level prepared statements working in
# transaction mode (max_prepared_statements), which psycopg uses after five executions of a
# statement. Debian 13 (trixie) ships 1.24; Debian 12 (bookworm) ships 1.18, so there it comes
# from the trixie suite that scripts/install-postgres.sh adds with an apt pin of priority 100
# (`-t trixie`: this package and only what it needs come from trixie).
# Idempotent: does nothing when a recent enough pgbouncer is installed.
set -euo pipefail

MINIMUM=1.21
BIN=/usr/sbin/pgbouncer

version() { "$BIN" --version 2>/dev/null | awk '/^PgBouncer/ {print $2; exit}'; }

if [ -x "$BIN" ] && dpkg --compare-versions "$(version)" ge "$MINIMUM"; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-pgbouncer: PgBouncer >= $MINIMUM is missing and installing it needs root." >&2
    echo "install-pgbouncer: run 'sudo $0' once, or install Debian's pgbouncer yourself." >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
target=()
policy="$(apt-cache policy pgbouncer)"
candidate="$(awk '/Candidate:/ {print $2}' <<<"$policy")"
if [ "$candidate" = "(none)" ] || dpkg --compare-versions "$candidate" lt "$MINIMUM"; then
    if ! grep -q ' trixie/' <<<"$policy"; then
        echo "install-pgbouncer: apt offers pgbouncer $candidate (< $MINIMUM) and no trixie suite;" >&2
        echo "install-pgbouncer: run scripts/install-postgres.sh (it adds trixie on bookworm) or add PGDG's apt repository." >&2
        exit 1
    fi
    target=(-t trixie)
fi

echo "install-pgbouncer: installing pgbouncer ${target[*]} (one-time)"
apt-get install -y -qq --no-install-recommends "${target[@]}" pgbouncer
# The package's own service (port 6432, /etc/pgbouncer) is not ours: engram runs its own.
if command -v systemctl >/dev/null && systemctl is-active --quiet pgbouncer 2>/dev/null; then
    systemctl disable --now pgbouncer >/dev/null 2>&1 || true
fi

[ -x "$BIN" ] && dpkg --compare-versions "$(version)" ge "$MINIMUM" \
    || { echo "install-pgbouncer: installed, but $BIN is missing or older than $MINIMUM" >&2; exit 1; }
echo "install-pgbouncer: $("$BIN" --version | head -1)"
