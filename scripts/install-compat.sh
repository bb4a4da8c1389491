#!/usr/bin/env bash
# Install each framework of the compatibility suite (tests/compat/<name>/) in a throw-away
# virtual environment of its own, .local/compat/<name>/: its requirements.txt (the integration,
# pinned) under its constraints.txt (pip freeze of a working install), so every run installs the
# same versions. Idempotent: a stamp in each environment holds the sha256 of both files, and a
# matching environment is left alone; one whose files changed is made again from nothing.
# `./scripts/install-compat.sh NAME...` installs only those.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
command -v "${PYTHON}" >/dev/null || { echo "install-compat: ${PYTHON} is required" >&2; exit 1; }

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for dir in "${ROOT}"/tests/compat/*/; do
        [ -f "${dir}requirements.txt" ] && names+=("$(basename "${dir}")")
    done
fi

for name in "${names[@]}"; do
    src="${ROOT}/tests/compat/${name}"
    env="${ROOT}/.local/compat/${name}"
    stamp="${env}/.engram-compat-sha256"
    want="$(cat "${src}/requirements.txt" "${src}/constraints.txt" | sha256sum | cut -d' ' -f1)"
    if [ -f "${stamp}" ] && [ "$(cat "${stamp}")" = "${want}" ] && [ -x "${env}/bin/python" ]; then
        continue
    fi
    echo "install-compat: ${name} (${env})"
    rm -rf "${env}"
    "${PYTHON}" -m venv "${env}"
    "${env}/bin/pip" install --quiet --disable-pip-version-check \
        -r "${src}/requirements.txt" -c "${src}/constraints.txt" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    echo "${want}" > "${stamp}"
done
