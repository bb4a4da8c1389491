"""The event endpoints, the sweeper's selection, and one add request through a real worker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from memory.actions import stale_events
from memory.models import Memory, MemoryEvent
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import auth, make_key

ROOT = Path(__file__).resolve().parents[2]


class EventsTestCase(BaseTestCase):
    def queue(self, text: str) -> str:
        with self.captureOnCommitCallbacks(execute=False):
            body = {"messages": text, "user_id": "alice", "infer": True}
            return str(self.call("post", "/v3/memories/add/", body).json()["event_id"])

    def test_it_shows_one_event(self) -> None:
        event_id = self.queue("I like tea")
        body = self.call("get", f"/v1/event/{event_id}/").json()
        assert (body["id"], body["status"], body["results"], body["event_type"]) == (
            event_id,
            "PENDING",
            [],
            "ADD",
        )

    def test_it_validates_ownership_of_events(self) -> None:
        event_id = self.queue("I like tea")
        assert self.call("get", f"/v1/event/{event_id}/", who=self.charlie).status_code == 404
        assert self.call("get", "/v1/events/", who=self.charlie).json()["count"] == 0

    def test_it_lists_events_filtered_by_status(self) -> None:
        first, second = self.queue("I like tea"), self.queue("I like coffee")
        with project_context(self.alice.key.project_id):
            MemoryEvent.objects.filter(pk=first).update(status="FAILED", error="boom")
        failed = self.call("get", "/v1/events/?status=failed").json()
        assert [e["id"] for e in failed["results"]] == [first]
        everything = self.call("get", "/v1/events/?page_size=1").json()
        assert (everything["count"], len(everything["results"])) == (2, 1)
        assert everything["results"][0]["id"] == second
        assert self.call("get", "/v1/events/?status=lost").status_code == 400

    def test_it_picks_lost_and_abandoned_events_for_the_sweeper(self) -> None:
        now = timezone.now()
        fresh, lost, abandoned, running = (
            self.queue(t) for t in ("a b c", "d e f", "g h i", "j k l")
        )
        pid = self.alice.key.project_id
        with project_context(pid):
            MemoryEvent.objects.filter(pk=lost).update(created_at=now - timedelta(minutes=5))
            MemoryEvent.objects.filter(pk=abandoned).update(
                status="RUNNING", lease_until=now - timedelta(seconds=1)
            )
            MemoryEvent.objects.filter(pk=running).update(
                status="RUNNING", lease_until=now + timedelta(minutes=1)
            )
        picked = {event for event, _ in stale_events(now, timedelta(minutes=1))}
        assert picked == {lost, abandoned}
        assert fresh not in picked


def database_url() -> str:
    db = connections["default"].settings_dict
    return f"postgresql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@pytest.fixture
def worker(committed_db: None) -> Any:
    """A real `dramatiq config.worker` process on the test database (offline extractor)."""
    env = {**os.environ, "DATABASE_URL": database_url(), "ENGRAM_LOG_LEVEL": "WARNING"}
    env.pop("ANTHROPIC_API_KEY", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "dramatiq", "config.worker", "--processes", "1", "--threads", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    yield process
    process.terminate()
    process.wait(timeout=30)


def test_it_processes_an_add_request_end_to_end(worker: Any, client: Any) -> None:
    key = make_key("acme", "worker-test")
    body = {"messages": "Hi! I love hiking in the Alps. What's new?", "user_id": "alice"}
    response = client.post(
        "/v3/memories/add/", body, content_type="application/json", headers=auth(key.raw)
    )
    event_id = response.json()["event_id"]
    deadline = time.monotonic() + 60
    status = "PENDING"
    while time.monotonic() < deadline and status in ("PENDING", "RUNNING"):
        time.sleep(0.25)
        status = client.get(f"/v1/event/{event_id}/", headers=auth(key.raw)).json()["status"]
    assert status == "SUCCEEDED", worker.stdout.read() if worker.poll() is not None else status
    event = client.get(f"/v1/event/{event_id}/", headers=auth(key.raw)).json()
    assert (event["extractor"], [r["event"] for r in event["results"]]) == ("offline", ["ADD"])
    with project_context(key.key.project_id):
        assert list(Memory.objects.values_list("text", flat=True)) == ["I love hiking in the Alps."]
