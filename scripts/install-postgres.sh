#!/usr/bin/env bash
# Install PostgreSQL 17 with pgvector and Apache AGE if they are missing.
#
# Debian 13 (trixie) ships all three as packages. On Debian 12 (bookworm) we add the trixie suite
# with an apt pin of priority 100, so nothing is upgraded from it by accident; the install itself
# runs with `-t trixie` so that these packages, and only what they need, come from trixie.
# Idempotent: does nothing when the binaries and extension files are already there.
set -euo pipefail

PG_MAJOR=17
PG_BIN="/usr/lib/postgresql/${PG_MAJOR}/bin"
PG_SHARE="/usr/share/postgresql/${PG_MAJOR}/extension"
PACKAGES=("postgresql-${PG_MAJOR}" "postgresql-${PG_MAJOR}-pgvector" "postgresql-${PG_MAJOR}-age")

installed() {
    [ -x "${PG_BIN}/postgres" ] && [ -f "${PG_SHARE}/vector.control" ] && [ -f "${PG_SHARE}/age.control" ]
}

if installed; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-postgres: PostgreSQL ${PG_MAJOR} with pgvector and AGE is missing and installing it needs root." >&2
    echo "install-postgres: run 'sudo $0' once, or install ${PACKAGES[*]} yourself." >&2
    exit 1
fi

. /etc/os-release
export DEBIAN_FRONTEND=noninteractive
target=()
if [ "${VERSION_CODENAME:-}" = "bookworm" ]; then
    cat > /etc/apt/sources.list.d/engram-trixie.sources <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    cat > /etc/apt/preferences.d/engram-trixie <<PIN
# engram: trixie is only used for PostgreSQL ${PG_MAJOR}, pgvector, AGE and their dependencies.
Package: *
Pin: release n=trixie
Pin-Priority: 100
PIN
    target=(-t trixie)
fi

echo "install-postgres: installing ${PACKAGES[*]} (one-time, a few minutes)"
apt-get update -qq
# Debian's postgresql-common would create and start a "main" cluster on 5432; we run our own.
mkdir -p /etc/postgresql-common/createcluster.d
echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/engram.conf
apt-get install -y -qq --no-install-recommends "${target[@]}" "${PACKAGES[@]}"

installed || { echo "install-postgres: packages installed but files are missing" >&2; exit 1; }
echo "install-postgres: $("${PG_BIN}/postgres" --version)"
