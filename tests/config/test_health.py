"""The health probes (issue #51, part 2; memory/health.py): /livez answers without the database,
/readyz checks the database under its deadline, the migrations, the embedding model and the
worker's heartbeat (a real worker's too), unauthenticated, from any Host, without a log line per
call; behind a real gunicorn too (its access log skips them)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError, connection
from django.test import Client, override_settings

from memory import health
from memory.text import embeddings
from tests.config.test_gunicorn import exchange, gunicorn_server, http_request
from tests.memory.test_events import start_worker, stop, wait_for

pytestmark = pytest.mark.django_db

POD = "10.1.2.3:8000"  # a kubelet probes the pod's address, not a known host


def no_workers() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM dramatiq.worker")


@pytest.fixture(autouse=True)
def _fresh_state() -> Any:
    health._migrated, health._last_ready = False, None
    no_workers()
    yield
    health._migrated, health._last_ready = False, None
    no_workers()  # a committed test's rows outlive it (the broker's table is not flushed)


def heartbeat(seconds_ago: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO dramatiq.worker (worker_id, heartbeat_at) "
            "VALUES (gen_random_uuid(), now() - make_interval(secs => %s))",
            [seconds_ago],
        )


def probe(path: str, params: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    answer = Client(HTTP_HOST=POD).get(path, params)
    assert answer["Content-Type"] == "application/json"
    assert answer["Cache-Control"] == "no-store"
    return answer.status_code, json.loads(answer.content)


def test_liveness_answers_without_the_database() -> None:
    with mock.patch.object(connection, "cursor", side_effect=OperationalError("down")):
        assert probe("/livez") == (200, {"status": "alive"})


def test_readiness_checks_each_part_and_says_what_failed() -> None:
    status, body = probe("/readyz")
    assert status == 503, body  # no worker has ever beaten
    assert body["status"] == "not ready" and body["detail"] == "Not ready: worker."
    checks = body["checks"]
    assert set(checks) == {"database", "migrations", "embedder", "worker"}
    assert checks["database"]["ok"] and checks["database"]["ms"] >= 0
    assert checks["migrations"] == {"ok": True}
    assert checks["embedder"] == {"ok": True, "model": embeddings.active_space().name}
    assert checks["worker"] == {"ok": False, "workers": 0, "last_heartbeat_seconds": None}
    # Without the worker check (the API serving while workers are down), ready.
    assert probe("/readyz", {"skip": "worker"})[0] == 200
    heartbeat(2)
    status, body = probe("/readyz")
    assert status == 200 and body["status"] == "ready" and "detail" not in body
    assert body["checks"]["worker"]["workers"] == 1
    assert 1 <= body["checks"]["worker"]["last_heartbeat_seconds"] < 30


@override_settings(ENGRAM_WORKER_HEARTBEAT_SECONDS=60)
def test_a_stale_heartbeat_is_a_dead_worker() -> None:
    heartbeat(90)
    status, body = probe("/readyz")
    assert status == 503 and body["checks"]["worker"]["workers"] == 0
    assert body["checks"]["worker"]["last_heartbeat_seconds"] >= 90


def test_a_pending_migration_and_another_embedding_model_are_not_ready() -> None:
    heartbeat(1)
    with mock.patch("memory.health.MigrationExecutor.migration_plan", return_value=[("m", False)]):
        status, body = probe("/readyz")
    assert status == 503 and body["checks"]["migrations"] == {"ok": False, "pending": 1}
    other = embeddings.Space("local", 384, "", "some-other-model")
    with mock.patch.object(embeddings, "recorded_space", return_value=other):
        status, body = probe("/readyz")
    assert status == 503 and body["checks"]["embedder"]["recorded"] == "local:some-other-model"
    assert body["detail"] == "Not ready: embedder."


def test_a_database_that_does_not_answer_fails_fast_and_skips_the_rest() -> None:
    down = mock.Mock(side_effect=OperationalError("timeout"))
    with mock.patch.dict(health.PROBES, {"database": down}):
        status, body = probe("/readyz")
    assert status == 503
    assert body["checks"]["database"] == {"ok": False, "error": "OperationalError: timeout"}
    assert body["checks"]["worker"] == {"ok": False, "error": "the database does not answer"}


def test_only_get_and_no_log_line_per_call(caplog: pytest.LogCaptureFixture) -> None:
    answer = Client(HTTP_HOST=POD).post("/readyz")
    assert answer.status_code == 405 and answer["Allow"] == "GET, HEAD"
    heartbeat(1)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            probe("/readyz")
        connection.cursor().execute("DELETE FROM dramatiq.worker")
        for _ in range(3):
            probe("/readyz")
    lines = [r.getMessage() for r in caplog.records]
    # One line when it became ready, one when it stopped: never one per call.
    assert lines == ["readiness: ready", "readiness: not ready (Not ready: worker.)"], lines


def pod_request(path: str) -> bytes:
    """A probe as a kubelet sends it: to the pod's address, which no setting names."""
    return f"GET {path} HTTP/1.1\r\nHost: {POD}\r\nConnection: close\r\n\r\n".encode()


def test_behind_gunicorn_the_probes_answer_and_leave_no_access_line(
    committed_db: None, tmp_path: Path
) -> None:
    # Committed: gunicorn's own access-log rows (its unauthenticated pings) are flushed after.
    log = tmp_path / "gunicorn.log"
    heartbeat(1)
    with gunicorn_server(log, ENGRAM_LOG_LEVEL="INFO") as port:
        status, _, body = exchange(port, pod_request("/livez"))
        assert (status, json.loads(body)) == (200, {"status": "alive"})
        status, _, body = exchange(port, pod_request("/readyz?skip=worker"))
        assert status == 200, body
        assert exchange(port, http_request("/v1/ping/"))[0] == 401  # no key: an access line
    lines = log.read_text()
    assert '"GET /v1/ping/"' in lines and "/livez" not in lines and "/readyz" not in lines


@override_settings(ENGRAM_WORKER_HEARTBEAT_SECONDS=4)
def test_a_real_worker_makes_it_ready_and_its_stop_makes_it_not(committed_db: None) -> None:
    # The heartbeat rows a real `dramatiq config.worker` writes, idle (every second here).
    worker = start_worker(ENGRAM_WORKER_HEARTBEAT_SECONDS="4")
    try:
        assert wait_for(lambda: probe("/readyz")[0] == 200, seconds=60), probe("/readyz")
        checks = probe("/readyz")[1]["checks"]["worker"]
        assert checks["workers"] >= 1 and checks["last_heartbeat_seconds"] < 4
    finally:
        stop(worker)
    assert wait_for(lambda: probe("/readyz")[0] == 503, seconds=30)
    assert probe("/readyz")[1]["detail"] == "Not ready: worker."
