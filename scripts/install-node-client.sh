#!/usr/bin/env bash
# Install the official JavaScript client (mem0ai, pinned by tests/clients/js/package-lock.json)
# for tests/memory/test_mem0_js_client.py, if it is missing or does not match the lockfile.
#
# Needs Node.js 18 or later; installs Debian's `nodejs` and `npm` with apt-get when node is
# missing (as install-browser.sh does Chromium). `npm ci` reproduces the lockfile exactly, with
# npm's cache in .local/npm-cache. Peer dependencies (the vector stores and model SDKs of
# mem0ai's open-source half, which the Platform client never loads) are left out, and no package
# runs an install script (one would download a prebuilt native binary). Idempotent: a stamp in
# node_modules holds the lockfile's sha256, and the step is silent when it matches.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLIENT_DIR="${ROOT}/tests/clients/js"
LOCK="${CLIENT_DIR}/package-lock.json"
STAMP="${CLIENT_DIR}/node_modules/.engram-lock-sha256"
MIN_NODE=18

node_major() {
    node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    packages=()
    command -v node >/dev/null || packages+=(nodejs)
    command -v npm >/dev/null || packages+=(npm)
    bash "${ROOT}/scripts/apt-install.sh" install-node-client "${packages[@]}"
fi

major="$(node_major)"
if [ "${major}" -lt "${MIN_NODE}" ]; then
    echo "install-node-client: Node.js ${MIN_NODE} or later is required, found $(node --version 2>/dev/null || echo none)" >&2
    exit 1
fi

want="$(sha256sum "${LOCK}" | cut -d' ' -f1)"
if [ -f "${STAMP}" ] && [ "$(cat "${STAMP}")" = "${want}" ]; then
    exit 0
fi

mkdir -p "${ROOT}/.local/npm-cache"
(
    cd "${CLIENT_DIR}"
    npm_config_cache="${ROOT}/.local/npm-cache" npm_config_update_notifier=false \
        npm ci --no-audit --no-fund --omit=peer --ignore-scripts --loglevel=error
)
echo "${want}" >"${STAMP}"
echo "install-node-client: mem0ai $(node -p "require('${CLIENT_DIR}/node_modules/mem0ai/package.json').version") on node $(node --version)"
