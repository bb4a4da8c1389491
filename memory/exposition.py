"""The metrics scrape (issue #51): every process's counts, and what only the database knows.

One scrape answers, in Prometheus' text format:
- the counts of every process that writes to ENGRAM_METRICS_DIR (config.metrics), summed by
  prometheus-client's MultiProcessCollector, or this process's own when there is no directory;
- read at scrape time, in one short transaction under ENGRAM_READY_TIMEOUT_MS (DatabaseCollector):
  `engram_database_up`, each queue's messages by state and the age of its oldest due message,
  the workers whose heartbeat is recent and the age of the newest heartbeat, the application
  role's database sessions by state (what its connections are doing: Django keeps one per
  thread, so this is the "pool"), and `engram_build_info` (version, embedding model,
  extractor: names the operator chose).

Served two ways (docs/operations.md, Metrics): `GET /metrics` on the web server, only to a
request that carries ENGRAM_METRICS_TOKEN as a bearer token (MetricsMiddleware, which also times
every other request); and, with ENGRAM_METRICS_BIND set, on an address of the worker's own
(`serve`, forked by the worker's Dramatiq master: config.worker.Metrics). No tenant data: no
project, user or memory is read, and no label carries one.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from opentelemetry.trace import SpanKind
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from config import metrics, tracing
from memory import jobs
from memory.extraction.broker import SCHEMA

logger = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
QUEUES = sorted({job.queue_name for job in jobs.JOBS})
# A delay queue's messages (dramatiq's "<queue>.DQ") count as their queue's.
QUEUE_STATES = """
SELECT split_part(queue_name, '.', 1) AS queue,
    count(*) FILTER (WHERE state = 'queued' AND available_at <= now()),
    count(*) FILTER (WHERE state = 'queued' AND available_at > now()),
    count(*) FILTER (WHERE state = 'consumed'),
    count(*) FILTER (WHERE state = 'rejected'),
    extract(epoch FROM now() - min(available_at) FILTER (
        WHERE state = 'queued' AND available_at <= now()))
FROM {schema}.queue
WHERE split_part(queue_name, '.', 1) = ANY(%s)
GROUP BY 1
"""
WORKERS = """
SELECT count(*) FILTER (WHERE heartbeat_at > now() - make_interval(secs => %s)),
    extract(epoch FROM now() - max(heartbeat_at))
FROM {schema}.worker
"""
SESSIONS = """
SELECT coalesce(state, 'unknown'), count(*) FROM pg_stat_activity
WHERE datname = current_database() AND usename = current_user GROUP BY 1
"""


class DatabaseCollector(Collector):
    """The figures read from the database at scrape time (see the module docstring)."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("engram_database_up", "1 when the scrape's statements answered.")
        info = GaugeMetricFamily(
            "engram_build_info",
            "This deployment's version, embedding model and extractor (always 1).",
            labels=["version", "embedding_model", "extractor"],
        )
        model = (
            settings.ENGRAM_LOCAL_MODEL
            if settings.ENGRAM_EMBEDDER == "local"
            else settings.ENGRAM_EMBEDDING_MODEL
        )
        info.add_metric([_version(), model, settings.ENGRAM_EXTRACTOR], 1)
        yield info
        yield _prices()
        started = time.perf_counter()
        try:
            queues, workers, sessions = _read()
        except (DatabaseError, OSError) as exc:
            logger.warning("metrics: the database did not answer (%s)", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        took = GaugeMetricFamily(
            "engram_scrape_database_seconds", "How long the scrape's statements took."
        )
        took.add_metric([], time.perf_counter() - started)
        yield took
        yield from _queue_families(queues)
        alive, age = workers
        live = GaugeMetricFamily(
            "engram_workers_alive",
            "Worker processes whose heartbeat is within ENGRAM_WORKER_HEARTBEAT_SECONDS.",
        )
        live.add_metric([], alive)
        yield live
        if age is not None:
            beat = GaugeMetricFamily(
                "engram_worker_heartbeat_age_seconds", "Seconds since any worker's last heartbeat."
            )
            beat.add_metric([], age)
            yield beat
        held = GaugeMetricFamily(
            "engram_db_sessions",
            "The application role's database sessions by state (pg_stat_activity).",
            labels=["state"],
        )
        for state, count in sessions:
            held.add_metric([state], count)
        yield held


def _prices() -> Metric:
    """ENGRAM_MODEL_PRICES per token, by model and kind: a dashboard multiplies
    engram_model_tokens_total by it (on model, kind) for the models' cost."""
    family = GaugeMetricFamily(
        "engram_model_price_dollars_per_token",
        "The operator's price of a model's tokens (ENGRAM_MODEL_PRICES), US dollars per token.",
        labels=["model", "kind"],
    )
    for model, price in sorted(settings.ENGRAM_MODEL_PRICES.items()):
        for kind in ("input", "output", "cache_write", "cache_read"):
            family.add_metric([model, kind], getattr(price, kind) / 1_000_000)
    return family


def _version() -> str:
    return str(settings.SPECTACULAR_SETTINGS.get("VERSION", ""))


def _read() -> tuple[list[tuple[Any, ...]], tuple[int, float | None], list[tuple[str, int]]]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('statement_timeout', %s, true)",
            [str(settings.ENGRAM_READY_TIMEOUT_MS)],
        )
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [f"{SCHEMA}.worker"])
        broker = bool(cursor.fetchone()[0])  # the broker's schema exists once a worker ran
        queues: list[tuple[Any, ...]] = []
        workers: tuple[int, float | None] = (0, None)
        if broker:
            cursor.execute(QUEUE_STATES.format(schema=SCHEMA), [QUEUES])
            queues = cursor.fetchall()
            cursor.execute(
                WORKERS.format(schema=SCHEMA), [settings.ENGRAM_WORKER_HEARTBEAT_SECONDS]
            )
            alive, age = cursor.fetchone()
            workers = (int(alive), None if age is None else float(age))
        cursor.execute(SESSIONS)
        sessions = [(str(state), int(count)) for state, count in cursor.fetchall()]
    return queues, workers, sessions


def _queue_families(rows: Iterable[tuple[Any, ...]]) -> Iterator[Metric]:
    messages = GaugeMetricFamily(
        "engram_queue_messages",
        "Messages of each queue by state: due (waiting for a worker), delayed (a retry's or a "
        "backoff's wait), running (held by a worker), rejected (dead-lettered).",
        labels=["queue", "state"],
    )
    oldest = GaugeMetricFamily(
        "engram_queue_oldest_due_seconds",
        "How long the oldest due message of each queue has waited (0: none due).",
        labels=["queue"],
    )
    found = {row[0]: row for row in rows}
    for queue in QUEUES:
        _, due, delayed, running, rejected, age = found.get(queue, (queue, 0, 0, 0, 0, None))
        for state, count in (
            ("due", due),
            ("delayed", delayed),
            ("running", running),
            ("rejected", rejected),
        ):
            messages.add_metric([queue, state], int(count))
        oldest.add_metric([queue], float(age or 0.0))
    yield messages
    yield oldest


def registry() -> CollectorRegistry:
    """The scrape's registry: every process's counts (or this one's), and the database's."""
    found = CollectorRegistry(auto_describe=False)
    if metrics.multiprocess():
        MultiProcessCollector(found)  # type: ignore[no-untyped-call]  # the library's own
    else:
        found.register(_Local())
    found.register(DatabaseCollector())
    return found


class _Local(Collector):
    """This process's own counts (no ENGRAM_METRICS_DIR: tests, a single process)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def scrape() -> bytes:
    return generate_latest(registry())


def authorized(header: str | None) -> bool:
    """Whether an Authorization header carries ENGRAM_METRICS_TOKEN (compared in constant
    time); always, when no token is set (the worker's own address, kept private by its bind)."""
    token = settings.ENGRAM_METRICS_TOKEN
    if token is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


def route(request: HttpRequest) -> str:
    """The request's URL pattern (bounded), "(unmatched)" when none matched (a 404, a static
    file, a refusal before routing)."""
    match = getattr(request, "resolver_match", None)
    return str(match.route) if match is not None and match.route else "(unmatched)"


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class MetricsMiddleware:
    """Answers GET /metrics (with the token; off without one) and times every other request
    by method, route and status (engram_http_request_duration_seconds)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info == METRICS_PATH:
            return self._metrics(request)
        started = time.perf_counter()
        method = request.method if request.method in METHODS else "other"
        sent = {k: v for k in ("traceparent", "tracestate") if (v := request.headers.get(k))}
        with tracing.span(method, parent=sent, kind=SpanKind.SERVER) as span:
            response = self.get_response(request)
            pattern = route(request)
            if span is not None:
                span.update_name(f"{method} {pattern}")
                span.set_attribute("http.request.method", method)
                span.set_attribute("http.route", pattern)
                span.set_attribute("http.response.status_code", response.status_code)
        metrics.HTTP_REQUESTS.labels(
            method=method, route=pattern, status=str(response.status_code)
        ).observe(time.perf_counter() - started)
        return response

    def _metrics(self, request: HttpRequest) -> HttpResponse:
        response: HttpResponse
        if settings.ENGRAM_METRICS_TOKEN is None:
            response = JsonResponse(
                {"detail": "Metrics are off on this address: set ENGRAM_METRICS_TOKEN."},
                status=404,
            )
        elif not authorized(request.headers.get("Authorization")):
            response = JsonResponse(
                {"detail": "Metrics need the metrics token (Authorization: Bearer …)."},
                status=401,
            )
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        elif request.method not in ("GET", "HEAD"):
            response = JsonResponse({"detail": "Metrics answer GET and HEAD."}, status=405)
            response["Allow"] = "GET, HEAD"
        else:
            response = HttpResponse(scrape(), content_type=CONTENT_TYPE_LATEST)
        response["Cache-Control"] = "no-store"
        response._has_been_logged = True  # type: ignore[attr-defined]  # Django's request log
        return response
