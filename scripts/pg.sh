#!/usr/bin/env bash
# The project-local PostgreSQL 17 cluster: `pg.sh start | stop | status | psql [args]`.
#
# start: initialise the cluster if needed (data under .local/pg, or under /var/tmp when the
# postgres user cannot reach the checkout), start it on a unix socket and 127.0.0.1:$ENGRAM_PG_PORT,
# create the owner and application roles, the database and its extensions, and write the
# connection settings and a generated Django secret key (.local/secret_key, kept across runs)
# to .local/engram.env. Every step is idempotent; on a running cluster the settings are
# reloaded.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCAL="$ROOT/.local"
PG_BIN="/usr/lib/postgresql/17/bin"
PORT="${ENGRAM_PG_PORT:-5433}"
DB_NAME="${ENGRAM_DB_NAME:-engram}"
OWNER_ROLE="engram_owner"
APP_ROLE="engram_app"
EXTENSIONS=(vector age pg_trgm btree_gin)

mkdir -p "$LOCAL"
chmod 755 "$LOCAL"

as_pg() {
    # PostgreSQL refuses to run as root: use the postgres system user the packages create.
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_home() {
    # Where the cluster lives, decided once and recorded in .local/pgdir.
    if [ -f "$LOCAL/pgdir" ]; then cat "$LOCAL/pgdir"; return; fi
    local dir="$LOCAL/pg"
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres: "$dir"
        if ! runuser -u postgres -- test -w "$dir" 2>/dev/null; then
            # A parent directory (e.g. a 0700 home) is closed to postgres: keep the cluster in a
            # directory of its own outside the checkout.
            rmdir "$dir"
            dir="/var/tmp/engram-pg-$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)"
            mkdir -p "$dir" && chown postgres: "$dir" && chmod 700 "$dir"
        fi
    fi
    echo "$dir" > "$LOCAL/pgdir"
    echo "$dir"
}

PGHOME="$(pg_home)"
DATA="$PGHOME/data"
# Unix socket paths are limited to ~107 bytes, so the socket gets a short directory of its own.
SOCK="/tmp/engram-pg-$(printf '%s' "$PGHOME" | sha256sum | cut -c1-12)"
LOG="$PGHOME/postgres.log"

psql_super() {
    "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U postgres "$@"
}

running() {
    [ -f "$DATA/postmaster.pid" ] && as_pg "$PG_BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

secret() {
    # A random hex string of ${2:-24} bytes, made once and kept in .local/$1 (mode 600).
    local file="$LOCAL/$1"
    if [ ! -s "$file" ]; then
        (umask 077; head -c "${2:-24}" /dev/urandom | od -An -tx1 | tr -d ' \n' > "$file")
    fi
    cat "$file"
}

init_cluster() {
    [ -f "$DATA/PG_VERSION" ] && return
    echo "pg: initialising a PostgreSQL 17 cluster in $DATA"
    as_pg mkdir -p "$DATA"
    as_pg "$PG_BIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    # Local trust is safe here: the socket directory is private to the postgres user (and root).
    echo "include_if_exists = 'engram.conf'" | as_pg tee -a "$DATA/postgresql.conf" >/dev/null
}

write_conf() {
    # Rewritten on every start so a changed ENGRAM_PG_PORT takes effect. No AGE preload: with
    # it, DROP fails in databases without the extension; sessions run LOAD 'age' instead.
    as_pg tee "$DATA/engram.conf" >/dev/null <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCK'
unix_socket_permissions = 0700
max_connections = 200
shared_buffers = '512MB'
work_mem = '16MB'
maintenance_work_mem = '512MB'
logging_collector = off
# The log (postgres.log beside the data directory) must not hold users' text: no statement
# text, no bind parameters, no DETAIL lines (they quote key values, e.g. of a unique
# violation), and no slow-statement logging (it logs the statement). Errors keep one line.
log_statement = 'none'
log_min_duration_statement = -1
log_min_error_statement = panic
log_parameter_max_length = 0
log_parameter_max_length_on_error = 0
log_error_verbosity = terse
# Streaming replication (wal_level = replica and max_wal_senders are PostgreSQL's defaults;
# pg_hba trusts local replication): tests/config/test_replica.py streams a throw-away standby
# through a slot, and a slot left behind by a killed run may keep at most this much WAL.
max_slot_wal_keep_size = '8GB'
CONF
}

bootstrap() {
    local owner_pw app_pw
    owner_pw="$(secret owner_password)"
    app_pw="$(secret app_password)"
    psql_super -d postgres \
        -v owner="$OWNER_ROLE" -v app="$APP_ROLE" -v owner_pw="$owner_pw" -v app_pw="$app_pw" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'owner')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'owner') \gexec
SELECT format('CREATE ROLE %I LOGIN', :'app')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'app') \gexec
-- The owner creates databases (the test suite's too); the app role gets nothing beyond grants.
ALTER ROLE :"owner" LOGIN CREATEDB NOSUPERUSER NOBYPASSRLS PASSWORD :'owner_pw';
ALTER ROLE :"app" LOGIN NOCREATEDB NOCREATEROLE NOSUPERUSER NOBYPASSRLS PASSWORD :'app_pw';
SQL
    psql_super -d postgres -v db="$DB_NAME" -v owner="$OWNER_ROLE" <<'SQL'
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'owner')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SQL
    # Extensions need a superuser. Installing them in template1 too gives the test databases
    # Django creates (from template1) the same extensions.
    local db ext
    for db in template1 "$DB_NAME"; do
        for ext in "${EXTENSIONS[@]}"; do
            psql_super -d "$db" -c "CREATE EXTENSION IF NOT EXISTS $ext" 2>&1 | grep -v NOTICE || true
        done
        # AGE's schema belongs to the superuser with no grants: the owner creates graphs
        # (memory.graph's engram_ensure_graph) and the app runs cypher(), both need USAGE.
        psql_super -d "$db" -c "GRANT USAGE ON SCHEMA ag_catalog TO $OWNER_ROLE, $APP_ROLE"
    done
}

write_env() {
    local owner_pw app_pw
    owner_pw="$(secret owner_password)"
    app_pw="$(secret app_password)"
    (umask 077; cat > "$LOCAL/engram.env" <<ENV
# Written by scripts/pg.sh for the project-local cluster; do not commit.
ENGRAM_ENV=local
DATABASE_URL=postgresql://$APP_ROLE:$app_pw@127.0.0.1:$PORT/$DB_NAME
DATABASE_OWNER_URL=postgresql://$OWNER_ROLE:$owner_pw@127.0.0.1:$PORT/$DB_NAME
ENGRAM_DB_APP_ROLE=$APP_ROLE
ENGRAM_SECRET_KEY_FILE=$LOCAL/secret_key
ENV
)
}

start() {
    init_cluster
    write_conf
    if [ "$(id -u)" -eq 0 ]; then install -d -o postgres -m 700 "$SOCK"; else install -d -m 700 "$SOCK"; fi
    if running; then
        echo "pg: already running on port $PORT"
        # engram.conf may have changed; everything in it but the port takes effect on reload.
        psql_super -d postgres -c "SELECT pg_reload_conf()" >/dev/null
    else
        echo "pg: starting PostgreSQL 17 on 127.0.0.1:$PORT (socket $SOCK, log $LOG)"
        as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null
        touch "$LOCAL/pg.started-by-us"
    fi
    bootstrap
    secret secret_key 40 >/dev/null
    write_env
}

stop() {
    if running; then
        as_pg "$PG_BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
        echo "pg: stopped"
    fi
    rm -f "$LOCAL/pg.started-by-us"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) if running; then echo "running ($DATA, port $PORT)"; else echo "stopped"; exit 3; fi ;;
    psql) shift; psql_super "$@" ;;
    *) echo "usage: $0 start|stop|status|psql [args]" >&2; exit 2 ;;
esac
