"""Prometheus metrics (issue #51): every series engram exports, defined once, here.

Each process counts into its own files in one directory, ENGRAM_METRICS_DIR (prometheus-client's
multiprocess mode, PROMETHEUS_MULTIPROC_DIR), and whoever serves the scrape sums every process's
files (config.metrics_exposition): gunicorn's workers and Dramatiq's worker processes, however
many and however often replaced, are one target. The variable must be set before this module is
imported (it chooses how values are stored): config/gunicorn_conf.py gives the web server a fresh
directory of its own when none is set; scripts/run.sh and the compose file set one per host;
without one (tests, management commands) the counts stay in the process.

Labels are bounded and never tenant data: no project, user, memory or text; a route is its URL
pattern, an actor, queue or provider is one of the deployment's own names.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from config.env import env_optional

_dir = env_optional("ENGRAM_METRICS_DIR")
if _dir and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    os.makedirs(_dir, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _dir

from prometheus_client import Counter, Histogram  # noqa: E402 - after the directory is set

from config import tracing  # noqa: E402

# Seconds; from a cached key lookup (~1 ms) to the request budget's end (5 s) and past it.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Model calls and jobs: from a cached reply to a minutes-long extraction.
SLOW_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

HTTP_REQUESTS = Histogram(
    "engram_http_request_duration_seconds",
    "Web requests by method, route (its URL pattern) and status, from the first middleware.",
    ["method", "route", "status"],
    buckets=LATENCY_BUCKETS,
)
SEARCHES = Counter(
    "engram_searches_total",
    "Searches (API, MCP, dashboards) by strategy (exact scan of a bounded scope, or the HNSW "
    "index) and outcome (results, or nothing relevant).",
    ["strategy", "outcome"],
)
SEARCH_STATEMENT = Histogram(
    "engram_search_statement_seconds",
    "The ranking statement of a search, by strategy.",
    ["strategy"],
    buckets=LATENCY_BUCKETS,
)
EMBEDDING = Histogram(
    "engram_embedding_seconds",
    "Embedding calls by kind (query: a search's; texts: memories, messages, names) and "
    "embedder (local: the in-process model; hosted: the embedding API).",
    ["kind", "embedder"],
    buckets=LATENCY_BUCKETS,
)
EVENTS = Counter(
    "engram_events_total",
    "Attempts at add requests' extraction by outcome (succeeded, retried, failed) and attempt "
    "number.",
    ["outcome", "attempt"],
)
JOBS = Histogram(
    "engram_job_duration_seconds",
    "Worker messages by actor and outcome (done, error), from claim to acknowledgement.",
    ["actor", "outcome"],
    buckets=SLOW_BUCKETS,
)
MODEL_CALLS = Histogram(
    "engram_model_call_duration_seconds",
    "Model API requests by provider, step (the forced tool: extract, decide, …) and outcome "
    "(ok, refused, cut, or the failure's kind: timeout, rate_limited, server_error, "
    "connection_error, client_error, other).",
    ["provider", "step", "outcome"],
    buckets=SLOW_BUCKETS,
)
MODEL_TOKENS = Counter(
    "engram_model_tokens_total",
    "Model tokens by provider, model (as configured) and kind (input, output, cache_write, "
    "cache_read); times engram_model_price_dollars_per_token, their cost.",
    ["provider", "model", "kind"],
)
RERANKS = Counter(
    "engram_reranks_total",
    "Calls to the configured reranker (endpoint or judge) by outcome (reranked, failed).",
    ["reranker", "outcome"],
)
WEBHOOK_DELIVERIES = Counter(
    "engram_webhook_deliveries_total",
    "Webhook delivery attempts by outcome (delivered; retrying: an attempt failed, another "
    "follows; failed: the last attempt failed; dropped).",
    ["outcome"],
)
DEADLINES = Counter(
    "engram_deadlines_total",
    "Database statements cancelled at a deadline, by which (statement: statement_timeout or a "
    "web request's budget; lock: lock_timeout) and process kind (web, background).",
    ["deadline", "process"],
)
DB_CONNECTIONS = Counter(
    "engram_db_connections_opened_total",
    "Database sessions opened (Django keeps one per thread for ENGRAM_DB_CONN_MAX_AGE), by "
    "process kind.",
    ["process"],
)

TOKEN_KINDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_creation_input_tokens": "cache_write",
    "cache_read_input_tokens": "cache_read",
}


@contextmanager
def timed(histogram: Histogram, span: str = "", **labels: str) -> Iterator[None]:
    """Observe the block's wall time in `histogram` under `labels`, whether it raised or not;
    with `span`, also a trace span of that name with the labels as attributes (when tracing is
    on: config.tracing)."""
    started = time.perf_counter()
    try:
        if span:
            with tracing.span(span, {f"engram.{k}": v for k, v in labels.items()}):
                yield
        else:
            yield
    finally:
        histogram.labels(**labels).observe(time.perf_counter() - started)


def count_tokens(provider: str, model: str, usage: Any) -> None:
    """Add a model reply's usage (memory.extraction.llm.types.Usage) to MODEL_TOKENS."""
    for field, kind in TOKEN_KINDS.items():
        tokens = int(getattr(usage, field, 0) or 0)
        if tokens:
            MODEL_TOKENS.labels(provider=provider, model=model, kind=kind).inc(tokens)


def after_commit(count: Callable[[], None]) -> None:
    """Count once the caller's transaction commits (at once outside one): a rolled-back
    outcome was not one."""
    from django.db import transaction

    transaction.on_commit(count)


def count_event(outcome: str, attempt: int) -> None:
    """An attempt at an event ended (counted when the caller's transaction commits)."""
    from django.conf import settings

    label = str(max(1, min(int(attempt), int(settings.ENGRAM_EVENT_MAX_ATTEMPTS))))
    after_commit(EVENTS.labels(outcome=outcome, attempt=label).inc)


def failure_kind(exc: BaseException) -> str:
    """A model API failure's kind, for a label: the SDKs' (anthropic's, openai's) error classes
    share their names and an HTTP status."""
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if "Timeout" in name:
        return "timeout"
    if status == 429 or "RateLimit" in name:
        return "rate_limited"
    if isinstance(status, int) and status >= 500:
        return "server_error"
    if "Connection" in name:
        return "connection_error"
    if isinstance(status, int) and 400 <= status < 500:
        return "client_error"
    return "other"


def process_kind() -> str:
    """ "web" in the web server's processes (API deadlines), else "background"."""
    from config import deadlines

    return "web" if deadlines.kind() == "api" else "background"


def count_deadlines(
    execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
) -> Any:
    """A Django execute wrapper: count a statement the database (or the request's budget)
    cancelled at a deadline, as config.exceptions tells one (lock_timeout is 55P03)."""
    try:
        return execute(sql, params, many, context)
    except Exception as exc:
        # Here, not at the top: config.exceptions needs Django's settings, and this module is
        # imported before them (config.worker).
        from config.exceptions import deadline_exceeded

        if deadline_exceeded(exc):
            lock = getattr(exc.__cause__, "sqlstate", None) == "55P03"
            DEADLINES.labels(deadline="lock" if lock else "statement", process=process_kind()).inc()
        raise


def on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    """django.db.backends.signals.connection_created: count the session, and wrap its
    statements in count_deadlines, outermost (first: a wrapper pushed by
    `connection.execute_wrapper()`, such as the request budget, stays last and is the one its
    context pops)."""
    DB_CONNECTIONS.labels(process=process_kind()).inc()
    if count_deadlines not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, count_deadlines)


def multiprocess() -> bool:
    """Whether this process counts into a shared directory (see the module docstring)."""
    return "PROMETHEUS_MULTIPROC_DIR" in os.environ
