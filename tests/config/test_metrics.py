"""Prometheus metrics (issue #51, part 1; config/metrics.py, memory/exposition.py).

Every scrape is read by prometheus-client's own parser. In this process the counts are its own
(no ENGRAM_METRICS_DIR); the last tests scrape a real gunicorn of two worker processes (their
counts summed from the shared directory) and a real Dramatiq worker's own listener."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import anthropic
import psycopg
import pytest
from django.db import OperationalError, connection, transaction
from django.test import Client
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from config.prices import parse_prices
from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.llm.types import Context, ModelOutputError, Turn
from tests.base import BaseTestCase
from tests.config.test_gunicorn import free_port, gunicorn_process
from tests.factory import auth, make_key
from tests.fake_anthropic import FakeClaude, Reply
from tests.memory.test_events import database_url, stop, wait_for

TOKEN = "metrics-token-for-the-tests"
MODEL = "claude-haiku-5-5"
ROOT = Path(__file__).resolve().parents[2]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape, by name and labels (prometheus-client's parser)."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and wanted <= got)


def local(name: str, **labels: str) -> float:
    """This process's own count (the default registry), 0 before the first."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def metrics_token(settings: Any) -> str:
    settings.ENGRAM_METRICS_TOKEN = TOKEN
    return TOKEN


@pytest.mark.django_db
def test_metrics_are_off_without_a_token_and_need_it(settings: Any) -> None:
    settings.ENGRAM_METRICS_TOKEN = None
    off = Client().get("/metrics")
    assert off.status_code == 404 and "ENGRAM_METRICS_TOKEN" in off.json()["detail"]
    settings.ENGRAM_METRICS_TOKEN = TOKEN
    for header in ({}, {"Authorization": "Bearer wrong-token-of-some-length"}, auth(TOKEN)):
        refused = Client().get("/metrics", headers=header)
        assert refused.status_code == 401, header  # Token scheme (an API key's) is not Bearer
        assert refused["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert refused.json()["detail"]
    assert (
        Client().post("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405
    )
    ok = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok["Content-Type"].startswith("text/plain; version=")
    assert ok["Cache-Control"] == "no-store"


@pytest.mark.django_db
def test_a_scrape_has_the_database_figures(metrics_token: str, settings: Any) -> None:
    settings.ENGRAM_MODEL_PRICES = parse_prices('{"m-1": {"input": 1, "output": 5}}')
    with connection.cursor() as cursor:  # a due message of the events queue, a minute old
        cursor.execute("DELETE FROM dramatiq.queue")  # (rolled back with the test)
        cursor.execute(
            "INSERT INTO dramatiq.queue (message_id, queue_name, state, message, available_at) "
            "VALUES (gen_random_uuid(), 'events', 'queued', '{}', now() - interval '60 seconds'),"
            " (gen_random_uuid(), 'events.DQ', 'queued', '{}', now() + interval '1 hour')"
        )
        cursor.execute(
            "INSERT INTO dramatiq.worker (worker_id, heartbeat_at) "
            "VALUES (gen_random_uuid(), now())"
        )
    samples = parse(scrape(Client()))
    assert samples[("engram_database_up", frozenset())] == 1
    for queue in ("events", "summaries", "entities", "erasures", "webhooks", "profiles"):
        for state in ("due", "delayed", "running", "rejected"):
            assert ("engram_queue_messages", frozenset({("queue", queue), ("state", state)})) in (
                samples
            )
    assert total(samples, "engram_queue_messages", queue="events", state="due") == 1
    assert total(samples, "engram_queue_messages", queue="events", state="delayed") == 1
    assert 59 <= total(samples, "engram_queue_oldest_due_seconds", queue="events") < 120
    assert total(samples, "engram_queue_oldest_due_seconds", queue="webhooks") == 0
    assert samples[("engram_workers_alive", frozenset())] == 1
    assert samples[("engram_worker_heartbeat_age_seconds", frozenset())] < 5
    assert total(samples, "engram_db_sessions") >= 1
    assert total(samples, "engram_build_info", extractor="offline") == 1
    price = total(samples, "engram_model_price_dollars_per_token", model="m-1", kind="output")
    assert price == pytest.approx(5e-6)


def scrape(client: Client) -> str:
    answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    return str(answer.content.decode())


@pytest.mark.django_db
def test_a_database_that_does_not_answer_is_down_not_an_error(metrics_token: str) -> None:
    from unittest import mock

    with mock.patch("memory.exposition._read", side_effect=OperationalError("down")):
        samples = parse(scrape(Client()))
    assert samples[("engram_database_up", frozenset())] == 0
    assert total(samples, "engram_queue_messages") == 0


class ApiSeriesTest(BaseTestCase):
    def test_requests_searches_and_embeddings_move_their_series(self) -> None:
        route = "v1/memories/search/"
        before = {
            "search": local(
                "engram_http_request_duration_seconds_count",
                method="POST",
                route=route,
                status="200",
            ),
            "results": local("engram_searches_total", strategy="exact", outcome="results"),
            "nothing": local("engram_searches_total", strategy="exact", outcome="nothing_relevant"),
            "query": local("engram_embedding_seconds_count", kind="query", embedder="local"),
            "texts": local("engram_embedding_seconds_count", kind="texts", embedder="local"),
            "404": local(
                "engram_http_request_duration_seconds_count",
                method="GET",
                route="(unmatched)",
                status="404",
            ),
        }
        added = self.call(
            "post",
            "/v1/memories/",
            {"messages": "I keep bees on my roof", "user_id": "secret-user-7", "infer": False},
        )
        assert added.status_code == 200, added.content
        for user in ("secret-user-7", "someone-else"):
            found = self.call(
                "post", "/v2/memories/search/", {"query": "bees", "filters": {"user_id": user}}
            )
            assert found.status_code == 200, found.content
        self.client.get("/no/such/page/")
        route_v2 = "v2/memories/search/"
        assert (
            local(
                "engram_http_request_duration_seconds_count",
                method="POST",
                route=route_v2,
                status="200",
            )
            >= 2
        )
        assert (
            local(
                "engram_http_request_duration_seconds_count",
                method="POST",
                route=route,
                status="200",
            )
            == before["search"]
        )  # another route's count did not move
        assert local("engram_searches_total", strategy="exact", outcome="results") == (
            before["results"] + 1
        )
        assert local("engram_searches_total", strategy="exact", outcome="nothing_relevant") == (
            before["nothing"] + 1
        )
        assert local("engram_embedding_seconds_count", kind="query", embedder="local") >= (
            before["query"] + 2
        )
        assert local("engram_embedding_seconds_count", kind="texts", embedder="local") >= (
            before["texts"] + 1
        )
        assert (
            local(
                "engram_http_request_duration_seconds_count",
                method="GET",
                route="(unmatched)",
                status="404",
            )
            == before["404"] + 1
        )

    def test_labels_carry_no_tenant_data(self) -> None:
        self.call(
            "post",
            "/v1/memories/",
            {"messages": "My locker code is 4471", "user_id": "user-zq81", "infer": False},
        )
        self.call(
            "post", "/v2/memories/search/", {"query": "locker", "filters": {"user_id": "user-zq81"}}
        )
        with self.settings(ENGRAM_METRICS_TOKEN=TOKEN):
            text = scrape(self.client)
        project = self.alice.key.project
        for secret in ("user-zq81", "4471", "locker", str(project.pk), project.name, "acme"):
            assert secret not in text, secret


def claude(fake: FakeClaude) -> ClaudeExtractor:
    return ClaudeExtractor(
        api_key="sk-test", base_url=fake.url, model=MODEL, max_tokens=512,
        timeout=5, max_retries=0,
    )  # fmt: skip


def test_model_calls_tokens_and_failures_are_counted(fake_claude: FakeClaude) -> None:
    calls = ("engram_model_call_duration_seconds_count", "claude", "record_facts")

    def count(outcome: str) -> float:
        return local(calls[0], provider=calls[1], step=calls[2], outcome=outcome)

    ok, failed, tokens = (
        count("ok"),
        count("server_error"),
        local("engram_model_tokens_total", provider="claude", model=MODEL, kind="input"),
    )
    context = Context(
        new_messages=[Turn(0, "user", "I moved to Lyon")], observed_on=date(2026, 12, 4)
    )
    fake_claude.script(Reply({"facts": [{"text": "User moved to Lyon", "positions": [0]}]}))
    claude(fake_claude).extract(context)
    assert count("ok") == ok + 1
    assert (
        local("engram_model_tokens_total", provider="claude", model=MODEL, kind="input")
        == tokens + 120
    )
    fake_claude.script(Reply(status=500))
    with pytest.raises(anthropic.InternalServerError):
        claude(fake_claude).extract(context)
    assert count("server_error") == failed + 1
    refused = count("refused")
    fake_claude.script(Reply(stop_reason="refusal"))
    with pytest.raises(ModelOutputError):
        claude(fake_claude).extract(context)
    assert count("refused") == refused + 1


def test_statements_cancelled_at_a_deadline_are_counted(committed_db: None) -> None:
    statement = local("engram_deadlines_total", deadline="statement", process="background")
    lock = local("engram_deadlines_total", deadline="lock", process="background")
    with pytest.raises(OperationalError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = 20")
        cursor.execute("SELECT pg_sleep(2)")
    assert local("engram_deadlines_total", deadline="statement", process="background") == (
        statement + 1
    )
    with psycopg.connect(database_url(), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(7401)")
        with pytest.raises(OperationalError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = 20")
            cursor.execute("SELECT pg_advisory_xact_lock(7401)")
    assert local("engram_deadlines_total", deadline="lock", process="background") == lock + 1


def fetch(url: str, token: str | None = TOKEN) -> tuple[int, str]:
    request = urllib.request.Request(url)  # noqa: S310 - a loopback URL of the test's own
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def call(port: int, path: str, key: str, body: bytes | None = None) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers={
            **auth(key), "Content-Type": "application/json"
        },
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
        return int(answer.status)


@pytest.fixture
def live_worker(committed_db: None, tmp_path: Path) -> Iterator[int]:
    """A real `dramatiq config.worker` (two processes) counting into a directory of its own, as
    on a host of its own, with its listener on a free port (yielded)."""
    port = free_port()
    env = {
        **os.environ, "DATABASE_URL": database_url(), "ENGRAM_LOG_LEVEL": "WARNING",
        "ENGRAM_METRICS_DIR": str(tmp_path / "worker-metrics"),
        "ENGRAM_METRICS_BIND": f"127.0.0.1:{port}", "ENGRAM_METRICS_TOKEN": TOKEN,
    }  # fmt: skip
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "dramatiq", "config.worker", "--processes", "2", "--threads", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert wait_for(lambda: _answers(port), seconds=60), "the worker's listener never answered"
        yield port
    finally:
        stop(process, signal.SIGTERM)


def _answers(port: int) -> bool:
    try:
        return fetch(f"http://127.0.0.1:{port}/metrics")[0] == 200
    except OSError:
        return False


def test_a_live_server_and_worker_are_scraped(live_worker: int, tmp_path: Path) -> None:
    key = make_key("acme", "metrics").raw
    shared = tmp_path / "web-metrics"
    env = {
        "ENGRAM_WEB_WORKERS": "2",
        "ENGRAM_METRICS_TOKEN": TOKEN,
        "ENGRAM_METRICS_DIR": str(shared),
    }
    with gunicorn_process(tmp_path / "gunicorn.log", **env) as (port, _):
        web = f"http://127.0.0.1:{port}/metrics"
        assert fetch(web, token=None)[0] == 401
        before = parse(fetch(web)[1])
        pings = 24
        for _ in range(pings):
            assert call(port, "/v1/ping/", key) == 200
        add = b'{"messages": "I play the oboe in a quartet", "user_id": "u1"}'
        assert call(port, "/v1/memories/", key, add) == 200
        worker = f"http://127.0.0.1:{live_worker}/metrics"

        def succeeded() -> float:
            return total(parse(fetch(worker)[1]), "engram_events_total", outcome="succeeded")

        assert wait_for(lambda: succeeded() >= 1, seconds=60)
        after = parse(fetch(web)[1])
        # Both gunicorn workers' counts, summed: every ping is there, whichever process took it.
        ping = {"method": "GET", "route": "v1/ping/", "status": "200"}
        name = "engram_http_request_duration_seconds_count"
        assert total(after, name, **ping) - total(before, name, **ping) == pings
        # Two processes count into the directory (each embedded at start: its warm-up).
        assert len({file.stem.rpartition("_")[2] for file in shared.glob("*.db")}) >= 2
        assert after[("engram_database_up", frozenset())] == 1
        assert after[("engram_workers_alive", frozenset())] >= 2
    status, text = fetch(worker)
    assert status == 200
    done = parse(text)
    assert (
        total(done, "engram_job_duration_seconds_count", actor="process_event", outcome="done") >= 1
    )
    assert total(done, "engram_events_total", outcome="succeeded", attempt="1") >= 1
    assert total(done, "engram_db_connections_opened_total", process="background") >= 1
    assert fetch(worker, token=None)[0] == 401
