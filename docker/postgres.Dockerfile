# PostgreSQL 17 with pgvector and Apache AGE, as scripts/install-postgres.sh installs locally.
#   docker build -f docker/postgres.Dockerfile -t engram-postgres docker
# AGE is deliberately NOT in shared_preload_libraries (it breaks DROP in databases without the
# extension); sessions that run Cypher execute LOAD 'age'.
FROM postgres:17-trixie

RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-17-pgvector postgresql-17-age \
 && rm -rf /var/lib/apt/lists/*

COPY postgres/init-engram.sh /docker-entrypoint-initdb.d/10-init-engram.sh
