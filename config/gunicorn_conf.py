"""gunicorn settings: `gunicorn -c config/gunicorn_conf.py [--bind HOST:PORT]`.

Used by scripts/run.sh (`make run`) and the Docker image. gunicorn runs this file itself;
values come from the environment through config.env, like the Django settings.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from config.env import env_int

wsgi_app = "config.wsgi:application"

# Metrics (config/metrics.py): every worker process counts into one directory, which /metrics
# sums, so a scrape sees the whole server whichever worker answers it. Without
# ENGRAM_METRICS_DIR the server gets a fresh one of its own, removed when it stops; one that is
# set (scripts/run.sh's, shared with the workers of the host) is the operator's to empty
# before the processes start.
_own_metrics_dir = None
if not os.environ.get("ENGRAM_METRICS_DIR") and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    _own_metrics_dir = tempfile.mkdtemp(prefix="engram-metrics-")
    os.environ["ENGRAM_METRICS_DIR"] = _own_metrics_dir

# One process per core: embedding and search are CPU-bound (bench/). Four threads each, so that
# a tenant's slow requests (a statement waiting on a lock, a large scope), of which a key may
# have two in flight per process and a project three (tenants.throttling.InFlight), leave
# threads for everyone else: with one thread, two slow requests held the whole server.
workers = env_int("ENGRAM_WEB_WORKERS", 2, minimum=1)
threads = env_int("ENGRAM_WEB_THREADS", 4, minimum=1)
# Seconds an idle client connection is kept open for its next request. The sync worker closes
# every connection after one response, so each request paid a TCP connect and accept
# (bench/http_floor.py); the gthread worker keeps it, even with one thread, and parks idle
# connections in its poller, not in a thread. 10 s outlasts httpx's 5 s pool expiry (the Mem0
# clients), so the client, not the server, closes an idle connection: no race on reuse.
# 0 = no keep-alive: the sync worker, one connection per request.
keepalive = env_int("ENGRAM_WEB_KEEPALIVE", 10, minimum=0)
# gunicorn switches "sync" to "gthread" by itself for threads > 1, but not a custom class.
worker_class = (
    "config.gunicorn_workers.JsonErrorThreadWorker"
    if threads > 1 or keepalive > 0
    else "config.gunicorn_workers.JsonErrorSyncWorker"
)

# A worker process is replaced after this many requests (plus up to a tenth more, at random,
# so the workers are not all replaced at once): a backstop against memory a long-lived process
# gathers. 0: never.
# SIGTERM: stop accepting, let the requests in flight finish (each is bounded by the request
# budget, ENGRAM_API_REQUEST_BUDGET_MS), then stop; a worker still busy after this is killed.
# Below the supervisor's stopwaitsecs (30) and the compose file's stop_grace_period.
graceful_timeout = env_int("ENGRAM_WEB_GRACEFUL_SECONDS", 20, minimum=1)
max_requests = env_int("ENGRAM_WEB_MAX_REQUESTS", 10_000, minimum=0)
max_requests_jitter = max_requests // 10

# No runtime control socket (gunicornc can change the worker count or stop the server); engram
# does not use it, and by default it would sit in $HOME, shared by every gunicorn of the user.
control_socket_disable = True

# gunicorn's own access log: the path without the query string (filters carry user ids), no
# referrer or user agent; our request id joins a line to its access-log row in the database.
accesslog = "-"
access_log_format = '%(h)s "%(m)s %(U)s" %(s)s %(B)s %(M)sms %({x-request-id}o)s'
# Both of gunicorn's logs with end-user dashboard tokens (/me/<token>/) redacted, for every
# request however it was answered (config.redaction).
logger_class = "config.gunicorn_logging.RedactingLogger"


def post_worker_init(worker: object) -> None:
    """Load the embedding model, then move everything loaded so far out of the collector's way.

    A full (generation 2) garbage collection walks every tracked object: with Django, the ONNX
    session and the tokenizer loaded that is ~220k objects, and it measured up to 150 ms, a pause
    that lands on whichever request allocates the object that triggers it (bench/hostile.py's
    p95 was 150-160 ms against a p50 of 25 ms). gc.freeze() puts the start-up objects in a
    permanent generation that collections skip: the longest pause measured 6 ms after it.
    """
    import gc

    from config import tracing
    from memory.text.embeddings import embed_one, embed_query

    # The models load on first use (the full one, and the int8 copy search queries go through):
    # load them before the first request.
    embed_one("warm up")
    embed_query("warm up")
    tracing.start("engram-web")  # when OpenTelemetry's variables ask for it: after the fork
    gc.freeze()


def on_exit(server: object) -> None:
    if _own_metrics_dir:
        shutil.rmtree(_own_metrics_dir, ignore_errors=True)
