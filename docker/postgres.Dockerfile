# PostgreSQL 17 with pgvector and Apache AGE, as scripts/install-postgres.sh installs locally.
#   docker build -f docker/postgres.Dockerfile -t engram-postgres docker
# AGE is deliberately NOT in shared_preload_libraries (it breaks DROP in databases without the
# extension); sessions that run Cypher execute LOAD 'age'.
FROM postgres:17-trixie

RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-17-pgvector postgresql-17-age \
 && rm -rf /var/lib/apt/lists/*

COPY postgres/init-engram.sh /docker-entrypoint-initdb.d/10-init-engram.sh

# What the server log may hold, as scripts/pg.sh configures the local cluster: no statement
# text, no bind parameters, no DETAIL lines (they quote key values) and no slow-statement
# logging (it logs the statement). Given as command-line options so they also apply to an
# existing data volume.
CMD ["postgres", \
     "-c", "log_statement=none", \
     "-c", "log_min_duration_statement=-1", \
     "-c", "log_min_error_statement=panic", \
     "-c", "log_parameter_max_length=0", \
     "-c", "log_parameter_max_length_on_error=0", \
     "-c", "log_error_verbosity=terse"]
