#!/usr/bin/env bash
# A project-local PgBouncer in transaction mode in front of the local cluster (scripts/pg.sh):
# `pgbouncer.sh start | stop | status | url`.
#
# start: write its configuration (pgbouncer.ini, and an auth_file holding the application
# role's SCRAM secret as the cluster stores it, so no password is written in clear), then start
# it on 127.0.0.1:$ENGRAM_PGBOUNCER_PORT (default: the cluster's port + 1000). Every database
# of the cluster is reachable through it under its own name, as the application role.
# The settings engram needs in transaction mode are the ones below; docs/operations.md
# ("Connection pooler") says why each is there. Idempotent; a running PgBouncer reloads.
# url: the DATABASE_URL through it, for ENGRAM_DB_POOL_MODE=transaction.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCAL="$ROOT/.local"
PG_PORT="${ENGRAM_PG_PORT:-5433}"
PORT="${ENGRAM_PGBOUNCER_PORT:-$((PG_PORT + 1000))}"
BIN=/usr/sbin/pgbouncer
APP_ROLE="engram_app"

[ -f "$LOCAL/pgdir" ] || { echo "pgbouncer: start the cluster first (scripts/pg.sh start)" >&2; exit 1; }
# Beside the cluster, where the postgres user can read (pg.sh chose it; PgBouncer, like
# PostgreSQL, refuses to run as root). One directory per port, so two can run side by side.
DIR="$(cat "$LOCAL/pgdir")/pgbouncer-$PORT"
PIDFILE="$DIR/pgbouncer.pid"

as_pg() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

running() {
    [ -f "$PIDFILE" ] && as_pg kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

write_config() {
    if [ "$(id -u)" -eq 0 ]; then install -d -o postgres -m 700 "$DIR"; else install -d -m 700 "$DIR"; fi
    local secret
    secret="$(bash "$ROOT/scripts/pg.sh" psql -d postgres -At \
        -c "SELECT rolpassword FROM pg_authid WHERE rolname = '$APP_ROLE'")"
    [ -n "$secret" ] || { echo "pgbouncer: role $APP_ROLE has no password (run scripts/pg.sh start)" >&2; exit 1; }
    printf '"%s" "%s"\n' "$APP_ROLE" "$secret" | as_pg tee "$DIR/userlist.txt" >/dev/null
    as_pg chmod 600 "$DIR/userlist.txt"
    as_pg tee "$DIR/pgbouncer.ini" >/dev/null <<INI
;; Written by scripts/pgbouncer.sh; rewritten on every start.
[databases]
* = host=127.0.0.1 port=$PG_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
pidfile = $PIDFILE
logfile = $DIR/pgbouncer.log
auth_type = scram-sha-256
auth_file = $DIR/userlist.txt

;; What engram needs behind a transaction pooler (docs/operations.md, "Connection pooler"):
;; a server connection per transaction, never per client session.
pool_mode = transaction
;; psycopg prepares a statement server-side after its fifth execution (the broker's claims,
;; the graph's cypher calls): PgBouncer re-prepares it on whichever server runs it.
max_prepared_statements = 200
;; Nothing to ignore: with ENGRAM_DB_POOL_MODE=transaction engram sends no \`options\`, and a
;; client that does (a misconfigured one) is refused rather than silently losing its deadlines.
ignore_startup_parameters =
;; Only runs in session mode; transaction mode hands a server on at each transaction's end.
server_reset_query = DISCARD ALL
max_client_conn = 400
default_pool_size = 20
INI
}

start() {
    [ -x "$BIN" ] || { echo "pgbouncer: $BIN is missing (make pgbouncer)" >&2; exit 1; }
    write_config
    if running; then
        as_pg kill -HUP "$(cat "$PIDFILE")"
        echo "pgbouncer: already running on port $PORT (reloaded)"
        return
    fi
    as_pg "$BIN" -d -q "$DIR/pgbouncer.ini"
    for _ in $(seq 50); do
        running && { echo "pgbouncer: transaction pooling on 127.0.0.1:$PORT (log $DIR/pgbouncer.log)"; return; }
        sleep 0.1
    done
    echo "pgbouncer: did not start; see $DIR/pgbouncer.log" >&2
    exit 1
}

stop() {
    if running; then
        as_pg kill -INT "$(cat "$PIDFILE")"
        for _ in $(seq 50); do running || break; sleep 0.1; done
        echo "pgbouncer: stopped"
    fi
}

url() {
    # DATABASE_URL from .local/engram.env, with PgBouncer's port in place of the cluster's.
    local direct
    direct="$(grep '^DATABASE_URL=' "$LOCAL/engram.env" | cut -d= -f2-)"
    echo "${direct/:$PG_PORT\//:$PORT/}"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) if running; then echo "running (port $PORT, $DIR)"; else echo "stopped"; exit 3; fi ;;
    url) url ;;
    *) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
