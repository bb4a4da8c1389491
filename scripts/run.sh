#!/usr/bin/env bash
# `make run`: serve engram on 127.0.0.1:$ENGRAM_PORT (default 8000) against the local cluster,
# with a demo organization, project and API key. Ctrl-C (or `make stop`) stops what it started.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOCAL="$ROOT/.local"
PORT="${ENGRAM_PORT:-8000}"
BIN="$ROOT/.venv/bin"
KEY_FILE="$LOCAL/demo_api_key"
METRICS_TOKEN_FILE="$LOCAL/metrics_token"
PIDS="$LOCAL/run.pids"

stop() {
    if [ -f "$PIDS" ]; then
        pids=$(cat "$PIDS")
        # A graceful stop first (supervisord stops each process in turn; the workers finish
        # their messages), while Postgres still runs.
        for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
        for _ in $(seq 1 150); do
            alive=""
            for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
            [ -z "$alive" ] && break
            sleep 0.5
        done
        for pid in $pids; do pkill -KILL -P "$pid" 2>/dev/null || true; kill -KILL "$pid" 2>/dev/null || true; done
        rm -f "$PIDS"
    fi
    if [ -f "$LOCAL/pg.started-by-us" ]; then bash "$ROOT/scripts/pg.sh" stop; fi
}

if [ "${1:-}" = "stop" ]; then
    stop
    exit 0
fi

set -a; . "$LOCAL/engram.env"; set +a

"$BIN/python" manage.py collectstatic --no-input -v 0

# The raw key cannot be recovered from its hash, so the demo key is kept in .local (mode 600)
# and minted again only when it no longer authenticates (e.g. after the database was reset).
mint_key() {
    (umask 077; "$BIN/python" manage.py create_api_key --org demo --project demo --name "make run" \
        | tail -n 1 > "$KEY_FILE")
}
[ -s "$KEY_FILE" ] || mint_key

# Metrics: every process of this host counts into one directory, emptied before they start
# (config/metrics.py); the web server's /metrics serves them all to the token kept in .local.
[ -s "$METRICS_TOKEN_FILE" ] || (umask 077; "$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(24))' > "$METRICS_TOKEN_FILE")
export ENGRAM_METRICS_DIR="$LOCAL/metrics"
export ENGRAM_METRICS_TOKEN="${ENGRAM_METRICS_TOKEN:-$(cat "$METRICS_TOKEN_FILE")}"
rm -rf "$ENGRAM_METRICS_DIR" && mkdir -p "$ENGRAM_METRICS_DIR"

trap 'echo; echo "Stopping…"; stop; exit 0' INT TERM

# The web server, the two workers (extraction and the rest; webhook deliveries on threads of
# their own) and the sweeper, under supervisord, which starts again whichever exits (a worker
# process killed by the OOM killer included): config/supervisord.conf.
export ENGRAM_ROOT="$ROOT" ENGRAM_BIN="$BIN" ENGRAM_RUN_DIR="$LOCAL" ENGRAM_BIND="127.0.0.1:$PORT"
export ENGRAM_WORKER_THREADS="${ENGRAM_WORKER_THREADS:-2}" ENGRAM_WEBHOOK_THREADS="${ENGRAM_WEBHOOK_THREADS:-4}"
export ENGRAM_SWEEP_SECONDS="${ENGRAM_SWEEP_SECONDS:-30}"
"$BIN/supervisord" -c config/supervisord.conf &
echo $! >> "$PIDS"

for _ in $(seq 1 50); do
    curl -fsS -o /dev/null "http://127.0.0.1:$PORT/api/schema/" 2>/dev/null && break
    sleep 0.2
done
status=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Token $(cat "$KEY_FILE")" \
    "http://127.0.0.1:$PORT/v1/ping/")
if [ "$status" = "401" ]; then mint_key; fi

# The extractor as the settings resolve it (config/settings.py ENGRAM_LLM_PROVIDER).
case "${ENGRAM_LLM_PROVIDER:-auto}" in
    claude) EXTRACTOR="Claude ${ENGRAM_LLM_MODEL:-claude-haiku-5-5}" ;;
    openai) EXTRACTOR="${ENGRAM_LLM_MODEL:-} at ${ENGRAM_OPENAI_BASE_URL:-https://api.openai.com/v1}" ;;
    offline) EXTRACTOR="offline extractor (ENGRAM_LLM_PROVIDER=offline)" ;;
    *) EXTRACTOR="offline extractor (no ANTHROPIC_API_KEY)"
       [ -n "${ANTHROPIC_API_KEY:-}" ] && EXTRACTOR="Claude ${ENGRAM_LLM_MODEL:-claude-haiku-5-5}" ;;
esac
cat <<MSG

  engram is running (web server, extraction worker: $EXTRACTOR, webhook worker, sweeper;
  each started again if it exits: .venv/bin/supervisorctl -s unix://.local/supervisor.sock status).
    API       http://127.0.0.1:$PORT/        (Mem0-compatible; try /v1/ping/)
    API docs  http://127.0.0.1:$PORT/api/docs/
    API key   $(cat "$KEY_FILE")
    Metrics   http://127.0.0.1:$PORT/metrics   (Authorization: Bearer \$(cat .local/metrics_token))
    Dashboard http://127.0.0.1:$PORT/dashboard/   (first login:
              set -a; . .local/engram.env; set +a; .venv/bin/python manage.py createsuperuser)

  Python:  MemoryClient(host="http://127.0.0.1:$PORT", api_key="<the key above>")
  Stop with Ctrl-C or \`make stop\`.

MSG
wait
