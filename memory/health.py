"""Health probes for an orchestrator or a load balancer (issue #51): unauthenticated, JSON, cheap.

- `GET /livez`: the process answers (no database, no model): 200 {"status": "alive"}.
- `GET /readyz`: 200 {"status": "ready", "checks": …} when every check passes, else 503
  {"status": "not ready", "detail": what failed, "checks": …}. The checks, each with `ok`:
  `database` (SELECT 1 under ENGRAM_READY_TIMEOUT_MS, with its time), `migrations` (none
  unapplied: once true, not asked again by this process), `embedder` (the model loaded in this
  process, and the same as the one the deployment's vectors come from), `worker` (a worker
  process heartbeat within ENGRAM_WORKER_HEARTBEAT_SECONDS: the broker's `dramatiq.worker`
  rows). `?skip=worker` leaves the worker out, for a load balancer that should keep the API
  serving while the workers are down (adds then queue).

Both answer from the first middleware (HealthMiddleware), before host validation (a kubelet
probes the pod's address), sessions, the access log and throttling; neither is logged per call
(gunicorn's access log skips them: config.gunicorn_logging; Django's request log is told the
response is logged); a change of readiness is logged once, at warning when it goes, at info when
it comes back. No tenant data: no project, user or memory is read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse

from config.probes import LIVE_PATH, PROBE_PATHS
from memory.extraction.broker import SCHEMA
from memory.text import embeddings

logger = logging.getLogger(__name__)

CHECKS = ("database", "migrations", "embedder", "worker")

_lock = threading.Lock()
_migrated = False  # every migration applied, seen once by this process
_last_ready: bool | None = None  # the last answer, to log only its changes


def live() -> dict[str, Any]:
    return {"status": "alive"}


def _database() -> dict[str, Any]:
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('statement_timeout', %s, true)",
            [str(settings.ENGRAM_READY_TIMEOUT_MS)],
        )
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 2)}


def _migrations() -> dict[str, Any]:
    global _migrated  # noqa: PLW0603 - a fact that cannot become false while the process runs
    if not _migrated:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if pending:
            return {"ok": False, "pending": len(pending)}
        _migrated = True
    return {"ok": True}


def _embedder() -> dict[str, Any]:
    embeddings.get_embedder()  # loaded by this process (the first probe loads it)
    active, recorded = embeddings.active_space(), embeddings.recorded_space()
    if recorded is None or recorded.same_model(active):  # None: not recorded yet (migrate does)
        return {"ok": True, "model": active.name}
    return {"ok": False, "model": active.name, "recorded": recorded.name}


def _worker() -> dict[str, Any]:
    ttl = settings.ENGRAM_WORKER_HEARTBEAT_SECONDS
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT to_regclass(%s) IS NOT NULL", [f"{SCHEMA}.worker"]
        )  # before the first worker ever ran, the broker's schema may not exist yet
        if not cursor.fetchone()[0]:
            return {"ok": False, "workers": 0, "last_heartbeat_seconds": None}
        cursor.execute(
            f"SELECT count(*) FILTER (WHERE heartbeat_at > now() - make_interval(secs => %s)),"  # noqa: S608 - SCHEMA is a constant
            f" extract(epoch FROM now() - max(heartbeat_at)) FROM {SCHEMA}.worker",
            [ttl],
        )
        alive, age = cursor.fetchone()
    seconds = None if age is None else round(float(age), 1)
    return {"ok": alive > 0, "workers": int(alive), "last_heartbeat_seconds": seconds}


PROBES: dict[str, Callable[[], dict[str, Any]]] = {
    "database": _database,
    "migrations": _migrations,
    "embedder": _embedder,
    "worker": _worker,
}


def ready(skip: frozenset[str] = frozenset()) -> tuple[bool, dict[str, Any]]:
    """Run each check (the database's first: without it the others are not asked)."""
    checks: dict[str, Any] = {}
    for name in CHECKS:
        if name in skip:
            continue
        if name != "database" and not checks.get("database", {"ok": True})["ok"]:
            checks[name] = {"ok": False, "error": "the database does not answer"}
            continue
        try:
            checks[name] = PROBES[name]()
        except (DatabaseError, OSError, RuntimeError, ValueError) as exc:
            checks[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    failed = [name for name, found in checks.items() if not found["ok"]]
    body: dict[str, Any] = {"status": "not ready" if failed else "ready", "checks": checks}
    if failed:
        body["detail"] = f"Not ready: {', '.join(failed)}."
    _note(not failed, body)
    return not failed, body


def _note(now_ready: bool, body: dict[str, Any]) -> None:
    global _last_ready
    with _lock:
        before, _last_ready = _last_ready, now_ready
    if before == now_ready:
        return
    if now_ready:
        logger.info("readiness: ready")
    else:
        logger.warning("readiness: not ready (%s)", body.get("detail"))


class HealthMiddleware:
    """Answers /livez and /readyz before every other middleware (see the module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info not in PROBE_PATHS:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response: HttpResponse = JsonResponse(
                {"detail": "Health probes answer GET and HEAD."}, status=405
            )
            response["Allow"] = "GET, HEAD"
        elif request.path_info == LIVE_PATH:
            response = JsonResponse(live())
        else:
            skip = frozenset(request.GET.get("skip", "").split(",")) & {"worker"}
            ok, body = ready(skip)
            response = JsonResponse(body, status=200 if ok else 503)
            if not ok:
                response["Retry-After"] = "5"
        response["Cache-Control"] = "no-store"
        response._has_been_logged = True  # type: ignore[attr-defined]  # Django's request log
        return response
