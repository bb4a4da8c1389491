#!/usr/bin/env bash
# Restore a `pg_dump -Fc` archive of the engram database into a new database:
#   scripts/restore.sh DUMP [DATABASE]        (DATABASE: $ENGRAM_DB_NAME, else engram)
#
# Connects as a superuser through the usual libpq variables (PGHOST, PGPORT, PGUSER,
# PGPASSWORD); PostgreSQL 17's tools come from $PG_BIN (default /usr/lib/postgresql/17/bin).
# The server needs pgvector and AGE installed, and the roles engram_owner and engram_app made
# as scripts/pg.sh or docker/postgres/init-engram.sh make them. Then, in one go:
#
# 1. DATABASE is created from template0, owned by engram_owner. It must not exist: the archive
#    creates AGE's schema and the extensions itself (its CREATE SCHEMA ag_catalog fails where
#    AGE is installed), and AGE refuses the DROP TABLE of its label tables that
#    `pg_restore --clean` would run. (A fresh docker volume has an empty engram database: drop
#    it first. A rehearsal restores beside the live database under another name.)
# 2. pg_restore, as the superuser, in one transaction, stopping at the first error. Owners are
#    kept (no --no-owner): the erasure and graph functions are SECURITY DEFINER and must run as
#    engram_owner, whom row-level security binds (owned by the superuser, they would bypass
#    it). The policies and the application role's grants come back with their tables,
#    functions and graph schemas. AGE's catalog rows are in the archive (pg_dump includes
#    extension configuration tables), and only a superuser may write them.
# 3. scripts/age-after-restore.sql re-points AGE's catalog at the restored graph schemas (the
#    graphs' ids are schema oids, which a dump does not carry over) and checks every graph.
# 4. ANALYZE: a restore brings no planner statistics.
#
# If a step fails, the database it created is dropped again. Afterwards run
# `manage.py migrate` as the owner (DATABASE_URL=$DATABASE_OWNER_URL) with the new database in
# the settings: it applies any newer migration and grants the application role again.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/17/bin}"
OWNER_ROLE="engram_owner"
APP_ROLE="engram_app"
EXTENSIONS=(vector age pg_trgm btree_gin)

die() {
    echo "restore: $*" >&2
    exit 1
}

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $0 DUMP [DATABASE]"
DUMP="$1"
DB="${2:-${ENGRAM_DB_NAME:-engram}}"

psql_on() {
    local db="$1"
    shift
    "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 --no-psqlrc -d "$db" "$@"
}

[ -r "$DUMP" ] || die "cannot read $DUMP"
"$PG_BIN/pg_restore" --list "$DUMP" >/dev/null || die "$DUMP is not a pg_dump -Fc archive"

superuser="$(psql_on postgres -At -c "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")"
[ "$superuser" = "t" ] || die "connect as a superuser (PGUSER): the archive creates extensions and writes AGE's catalog"
for role in "$OWNER_ROLE" "$APP_ROLE"; do
    found="$(psql_on postgres -At -v role="$role" <<'SQL'
SELECT 1 FROM pg_roles WHERE rolname = :'role'
SQL
)"
    [ "$found" = "1" ] || die "role $role is missing: create the roles first (scripts/pg.sh, docker/postgres/init-engram.sh)"
done
for ext in "${EXTENSIONS[@]}"; do
    found="$(psql_on postgres -At -v ext="$ext" <<'SQL'
SELECT 1 FROM pg_available_extensions WHERE name = :'ext'
SQL
)"
    [ "$found" = "1" ] || die "extension $ext is not installed on this server"
done
exists="$(psql_on postgres -At -v db="$DB" <<'SQL'
SELECT 1 FROM pg_database WHERE datname = :'db'
SQL
)"
[ -z "$exists" ] || die "database $DB exists: restore into a new database (drop it first if it is empty)"

echo "restore: creating database $DB (owner $OWNER_ROLE)"
psql_on postgres -v db="$DB" -v owner="$OWNER_ROLE" <<'SQL'
SELECT format('CREATE DATABASE %I OWNER %I TEMPLATE template0 ENCODING %L', :'db', :'owner', 'UTF8')
\gexec
SQL
drop_created() {
    echo "restore: failed; dropping database $DB again" >&2
    psql_on postgres -v db="$DB" <<'SQL' || true
SELECT format('DROP DATABASE %I', :'db')
\gexec
SQL
}
trap drop_created ERR

echo "restore: restoring $DUMP (one transaction)"
"$PG_BIN/pg_restore" --exit-on-error --single-transaction --dbname "$DB" "$DUMP"

echo "restore: re-pointing AGE's catalog at the restored graphs"
psql_on "$DB" --single-transaction -A -F ' ' -P footer=off -f "$ROOT/scripts/age-after-restore.sql"

echo "restore: collecting planner statistics (ANALYZE)"
psql_on "$DB" -c "ANALYZE"

trap - ERR
echo "restore: done. Next: manage.py migrate as $OWNER_ROLE on $DB (it grants $APP_ROLE again)."
