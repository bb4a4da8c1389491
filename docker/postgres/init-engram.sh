#!/usr/bin/env bash
# First start of the database container: the same roles, database and extensions that
# scripts/pg.sh creates for the local cluster.
set -euo pipefail
: "${ENGRAM_OWNER_PASSWORD:?set ENGRAM_OWNER_PASSWORD}"
: "${ENGRAM_APP_PASSWORD:?set ENGRAM_APP_PASSWORD}"
DB="${ENGRAM_DB_NAME:-engram}"

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    -v owner_pw="$ENGRAM_OWNER_PASSWORD" -v app_pw="$ENGRAM_APP_PASSWORD" -v db="$DB" <<'SQL'
CREATE ROLE engram_owner LOGIN CREATEDB NOSUPERUSER NOBYPASSRLS PASSWORD :'owner_pw';
CREATE ROLE engram_app LOGIN NOCREATEDB NOCREATEROLE NOSUPERUSER NOBYPASSRLS PASSWORD :'app_pw';
SELECT format('CREATE DATABASE %I OWNER engram_owner', :'db') \gexec
SQL

for db in template1 "$DB"; do
    for ext in vector age pg_trgm btree_gin; do
        psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$db" \
            -c "CREATE EXTENSION IF NOT EXISTS $ext"
    done
    # AGE's schema: the owner creates graphs, the app runs cypher() (as scripts/pg.sh).
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$db" \
        -c "GRANT USAGE ON SCHEMA ag_catalog TO engram_owner, engram_app"
done
