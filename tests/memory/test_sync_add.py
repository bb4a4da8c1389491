"""Synchronous adds (async_mode false; a legacy POST /v1/memories/ without async_mode), against
a real worker process: the request waits for the worker and answers what extraction did."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.pipeline import process_event
from memory.models import Memory, MemoryEvent
from tenants.db import project_context
from tests.factory import auth, make_key
from tests.fake_anthropic import FakeClaude, Reply
from tests.memory.test_events import start_worker, stop, wait_for


def post(client: Client, raw: str, path: str, body: dict[str, Any]) -> Any:
    return client.post(path, body, content_type="application/json", headers=auth(raw))


def warm(client: Client, raw: str, project: Any) -> None:
    """Until the worker has finished one queued add (it has started and loaded its model)."""
    queued = post(client, raw, "/v3/memories/add/", {"messages": "I own a kayak", "user_id": "w"})
    event_id = queued.json()["event_id"]

    def done() -> bool:
        with project_context(project):
            return MemoryEvent.objects.get(pk=event_id).status == "SUCCEEDED"

    assert wait_for(done, 90), "the worker never processed the warm-up add"


@pytest.fixture
def worker_key(committed_db: None, client: Client) -> Iterator[tuple[str, Any]]:
    key = make_key("acme", "sync-add")
    process = start_worker()
    try:
        warm(client, key.raw, key.key.project_id)
        yield key.raw, key.key.project_id
    finally:
        stop(process)


def test_a_legacy_v1_add_without_async_mode_answers_what_extraction_did(
    worker_key: tuple[str, Any], client: Client
) -> None:
    raw, project = worker_key
    # mem0ai 0.1.29: no output_format, no async_mode: the bare list of results.
    body = {"messages": [{"role": "user", "content": "I love hiking in the Alps."}],
            "user_id": "alice"}  # fmt: skip
    response = post(client, raw, "/v1/memories/", body)
    assert response.status_code == 200, response.content
    (result,) = response.json()
    assert (result["event"], result["memory"], result["data"]) == (
        "ADD",
        "I love hiking in the Alps.",
        {"memory": "I love hiking in the Alps."},
    )
    with project_context(project):
        assert Memory.objects.get(pk=result["id"]).user_id == "alice"

    # mem0ai 0.1.118 (what strands-agents-tools 0.8.10 pins): output_format v1.1, version v2.
    body = {"messages": [{"role": "user", "content": "I now hike in the Dolomites."}],
            "user_id": "alice", "output_format": "v1.1", "version": "v2"}  # fmt: skip
    answer = post(client, raw, "/v1/memories/", body).json()
    assert answer["status"] == "SUCCEEDED"
    assert [r["memory"] for r in answer["results"]] == ["I now hike in the Dolomites."]
    # strands-agents-tools reads `relations` as an object when present: none here.
    assert "relations" not in answer


def test_async_mode_false_on_v3_and_true_on_v1(worker_key: tuple[str, Any], client: Client) -> None:
    raw, _ = worker_key
    body = {"messages": "I work as a nurse.", "user_id": "bob", "async_mode": False}
    answer = post(client, raw, "/v3/memories/add/", body).json()
    assert (answer["status"], [r["event"] for r in answer["results"]]) == ("SUCCEEDED", ["ADD"])
    assert answer["warning"] is None
    # Said again: extraction finds it stored (NONE), and says so.
    again = post(client, raw, "/v3/memories/add/", body).json()
    assert [r["event"] for r in again["results"]] == ["NONE"]
    # mem0ai 1.x sends async_mode true: queued, as before.
    queued = post(client, raw, "/v1/memories/", {**body, "async_mode": True}).json()
    assert (queued[0]["status"], "event_id" in queued[0]) == ("PENDING", True)
    # v3 without async_mode: queued.
    assert (
        post(client, raw, "/v3/memories/add/", {**body, "async_mode": None}).json()["status"]
        == "PENDING"
    )


def test_a_replayed_synchronous_add_answers_the_same_results(
    worker_key: tuple[str, Any], client: Client
) -> None:
    raw, _ = worker_key
    body = {"messages": "I keep bees.", "user_id": "carol", "async_mode": False}
    headers = {**auth(raw), "Idempotency-Key": "sync-add-0001"}
    first = client.post("/v3/memories/add/", body, content_type="application/json", headers=headers)
    second = client.post(
        "/v3/memories/add/", body, content_type="application/json", headers=headers
    )
    assert first.json()["results"] == second.json()["results"]
    assert [r["event"] for r in first.json()["results"]] == ["ADD"]


def test_an_add_that_cannot_finish_in_time_answers_the_event_to_poll(
    committed_db: None, client: Client, settings: Any
) -> None:
    settings.ENGRAM_SYNC_ADD_WAIT_MS = 300  # and no worker runs
    key = make_key("acme", "sync-timeout")
    started = time.monotonic()
    body = {"messages": "I grow tomatoes.", "user_id": "dan", "output_format": "v1.1"}
    response = post(client, key.raw, "/v1/memories/", body)
    waited = time.monotonic() - started
    answer = response.json()
    assert (response.status_code, answer["status"], answer["results"]) == (202, "PENDING", [])
    assert f"/v1/event/{answer['event_id']}/" in answer["message"]
    assert waited < 3  # it gave up after its wait, not after some other deadline
    # The bare-list form says the same in Mem0's queued item.
    bare = post(client, key.raw, "/v1/memories/", {"messages": "I grow beans.", "user_id": "dan"})
    assert (bare.status_code, bare.json()[0]["status"]) == (202, "PENDING")
    # Nothing accepted is lost: a worker processes it later.
    process_event(answer["event_id"], key.key.project_id, OfflineExtractor())
    with project_context(key.key.project_id):
        assert Memory.objects.filter(text="I grow tomatoes.").count() == 1


def test_a_failed_extraction_is_a_502_naming_the_kept_request(
    committed_db: None, client: Client, fake_claude: FakeClaude
) -> None:
    fake_claude.script(Reply(stop_reason="refusal", repeat=True))
    key = make_key("acme", "sync-failed")
    process = start_worker(
        ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=fake_claude.url, ENGRAM_LLM_MAX_RETRIES="0"
    )
    try:
        warm_failed = post(
            client, key.raw, "/v3/memories/add/", {"messages": "I own a kayak", "user_id": "w"}
        ).json()["event_id"]

        def finished() -> bool:
            with project_context(key.key.project_id):
                return MemoryEvent.objects.get(pk=warm_failed).status == "FAILED"

        assert wait_for(finished, 90), "the worker never failed the warm-up add"
        body = {"messages": "I like tea", "user_id": "erin", "async_mode": False}
        response = post(client, key.raw, "/v3/memories/add/", body)
    finally:
        stop(process)
    answer = response.json()
    assert (response.status_code, answer["status"]) == (502, "FAILED")
    assert answer["event_id"] in answer["detail"]
    with project_context(key.key.project_id):
        assert MemoryEvent.objects.get(pk=answer["event_id"]).status == "FAILED"
