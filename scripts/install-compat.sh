#!/usr/bin/env bash
# Install each framework of the compatibility suite (tests/compat/<name>/) in a throw-away
# environment of its own: a Python one in ~/.cache/engram/compat/<name>/ (outside the checkout, so
# no tool that reads the project's files reads 2.8 GB of frameworks), its requirements.txt (the
# integration, pinned) under its constraints.txt (pip freeze of a working install), so every run
# installs the same versions; a JavaScript one (package-lock.json) with `npm ci` into the
# folder's node_modules. Idempotent: a stamp in each environment holds the sha256 of both files, and a
# matching environment is left alone; one whose files changed is made again from nothing.
# `./scripts/install-compat.sh NAME...` installs only those.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
command -v "${PYTHON}" >/dev/null || { echo "install-compat: ${PYTHON} is required" >&2; exit 1; }

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for dir in "${ROOT}"/tests/compat/*/; do
        if [ -f "${dir}requirements.txt" ] || [ -f "${dir}package-lock.json" ]; then
            names+=("$(basename "${dir}")")
        fi
    done
fi

for name in "${names[@]}"; do
    src="${ROOT}/tests/compat/${name}"
    if [ -f "${src}/package-lock.json" ]; then
        # A JavaScript integration: its lockfile exactly (npm ci), in the folder's node_modules
        # (git-ignored), no install scripts, npm's cache in .local/npm-cache.
        stamp="${src}/node_modules/.engram-compat-sha256"
        want="$(sha256sum "${src}/package-lock.json" | cut -d' ' -f1)"
        if [ -f "${stamp}" ] && [ "$(cat "${stamp}")" = "${want}" ]; then
            continue
        fi
        command -v npm >/dev/null || bash "${ROOT}/scripts/install-node-client.sh"
        echo "install-compat: ${name} (${src}/node_modules)"
        (cd "${src}" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
            --cache "${ROOT}/.local/npm-cache" >/dev/null)
        echo "${want}" > "${stamp}"
        continue
    fi
    env="${HOME}/.cache/engram/compat/${name}"
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
