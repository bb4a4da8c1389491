"""The official mem0ai client (2.x) against a live engram server, over real HTTP."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.models import AccessLog
from memory import actions
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.pipeline import process_event
from memory.models import Memory
from memory.text.embeddings import embed
from tenants.db import project_context
from tests.factory import make_key


@pytest.fixture
def client(live_api: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))
    from mem0 import MemoryClient

    key = make_key("acme", "client-test")
    client = MemoryClient(host=live_api, api_key=key.raw)
    yield client
    client.client.close()


def add(client: Any, texts: list[str], user_id: str) -> list[dict[str, Any]]:
    messages = [{"role": "user", "content": t} for t in texts]
    response = client.add(messages, filters={"user_id": user_id}, infer=False)
    assert response["status"] == "SUCCEEDED"
    results: list[dict[str, Any]] = response["results"]
    return results


def test_it_serves_the_official_client_end_to_end(client: Any) -> None:
    results = add(
        client,
        ["I love dark roast coffee", "My sister lives in Lisbon", "I am allergic to peanuts"],
        "alice",
    )
    assert [r["event"] for r in results] == ["ADD", "ADD", "ADD"]
    coffee_id = results[0]["id"]

    found = client.search("what does the user drink?", filters={"user_id": "alice"}, top_k=2)
    assert found["results"][0]["memory"] == "I love dark roast coffee"
    assert set(found["results"][0]["score_breakdown"]) == {
        "semantic",
        "bm25",
        "entity",
        "relevance",
        "distinctiveness",
        "answer_gap",
        "ranker",
    }

    page = client.get_all(filters={"user_id": "alice"}, page=1, page_size=2)
    assert (page["count"], len(page["results"])) == (3, 2)
    assert page["next"] is not None
    last = client.get_all(filters={"user_id": "alice"}, page=2, page_size=2)
    assert len(last["results"]) == 1

    assert client.get(coffee_id)["memory"] == "I love dark roast coffee"
    client.update(coffee_id, text="I love light roast coffee", metadata={"v": 2})
    updated = client.get(coffee_id)
    assert (updated["memory"], updated["metadata"]) == ("I love light roast coffee", {"v": 2})
    history = client.history(coffee_id)
    assert [h["event"] for h in history] == ["ADD", "UPDATE"]
    assert history[1]["old_memory"] == "I love dark roast coffee"

    client.delete(coffee_id)
    remaining = client.get_all(filters={"user_id": "alice"})
    assert {r["memory"] for r in remaining["results"]} == {
        "My sister lives in Lisbon",
        "I am allergic to peanuts",
    }


def test_it_supports_batches_users_and_bulk_deletes(client: Any) -> None:
    alice = add(client, ["Alice plays chess", "Alice runs marathons"], "alice")
    add(client, ["Bob keeps bees"], "bob")
    add(client, ["Carol sails"], "carol")

    client.batch_update([{"memory_id": alice[0]["id"], "text": "Alice plays Go"}])
    assert client.get(alice[0]["id"])["memory"] == "Alice plays Go"
    client.batch_delete([{"memory_id": alice[1]["id"]}])
    assert [r["memory"] for r in client.get_all(filters={"user_id": "alice"})["results"]] == [
        "Alice plays Go"
    ]

    users = client.users()
    assert {(u["type"], u["name"]) for u in users["results"]} == {
        ("user", "alice"),
        ("user", "bob"),
        ("user", "carol"),
    }

    client.delete_all(filters={"user_id": "bob"})  # sent as a Python repr in the query string
    assert client.get_all(filters={"user_id": "bob"})["results"] == []

    client.delete_users(user_id="carol")
    assert client.get_all(filters={"user_id": "carol"})["results"] == []
    assert {u["name"] for u in client.users()["results"]} == {"alice"}


def test_it_deletes_users_whose_ids_hold_a_slash_or_other_awkward_characters(
    client: Any,
) -> None:
    # The client quotes the id as one path segment ("/" as %2F); the server decodes the path.
    awkward = ["team/alpha", "50% off/#1?", "ü 日本"]
    for user_id in awkward:
        add(client, [f"A fact of {user_id}"], user_id)
    add(client, ["Bob keeps bees"], "bob")
    assert {u["name"] for u in client.users()["results"]} == {*awkward, "bob"}

    for user_id in awkward:
        client.delete_users(user_id=user_id)
        assert client.get_all(filters={"user_id": user_id})["results"] == []
    assert {u["name"] for u in client.users()["results"]} == {"bob"}


def test_it_reports_a_missing_memory_as_not_found(client: Any) -> None:
    from mem0.exceptions import MemoryNotFoundError

    with pytest.raises(MemoryNotFoundError):
        client.get(str(uuid.uuid4()))


def test_the_clients_identity_headers_reach_the_access_log(
    live_api: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))
    monkeypatch.setenv("MEM0_SOURCE", "engram-tests")
    monkeypatch.setenv("MEM0_APPLICATION", "identity-check")
    from mem0 import MemoryClient

    key = make_key("acme", "client-identity")
    client = MemoryClient(host=live_api, api_key=key.raw)
    try:
        add(client, ["I keep bees"], "alice")
    finally:
        client.client.close()
    with project_context(key.key.project_id):
        rows = list(AccessLog.objects.order_by("created_at").values_list("path", "client"))
    assert [path for path, _ in rows] == ["/v1/ping/", "/v3/memories/add/"]
    for _, client_headers in rows:
        assert client_headers["X-Mem0-Client"].startswith("mem0-python/")
        assert client_headers["X-Mem0-Source"] == "engram-tests"
        assert client_headers["X-Application"] == "identity-check"


def supersede(project_id: uuid.UUID, memory_id: str, text: str) -> str:
    """Replace a memory as an extraction UPDATE does (the old one kept, superseded)."""
    with project_context(project_id):
        old = Memory.objects.get(pk=memory_id)
        new = actions.NewMemory(text, embed([text])[0], old.scope, {}, [])
        return str(actions.do_supersede_memory(old, new, actor=actions.Actor.command("test")).id)


def test_the_read_flags_and_delete_linked_through_the_client(
    live_api: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))
    from mem0 import MemoryClient
    from mem0.exceptions import MemoryNotFoundError

    key = make_key("acme", "client-flags")
    client = MemoryClient(host=live_api, api_key=key.raw)
    try:
        (paris,) = add(client, ["I live in Paris"], "alice")
        lyon = supersede(key.key.project_id, paris["id"], "I moved to Lyon")
        nice = supersede(key.key.project_id, lyon, "I moved to Nice")
        alice = {"user_id": "alice"}

        def texts(found: dict[str, Any]) -> list[str]:
            return sorted(item["memory"] for item in found["results"])

        # The client's defaults send no flag: the latest version only.
        assert texts(client.get_all(filters=alice)) == ["I moved to Nice"]
        assert texts(client.search("where do I live?", filters=alice)) == ["I moved to Nice"]
        everything = ["I live in Paris", "I moved to Lyon", "I moved to Nice"]
        assert texts(client.get_all(filters=alice, latest_only=False)) == everything
        found = client.search(
            "where do I live?", filters=alice, latest_only=False, keyword_search=True,
            include_merged=True, threshold=0.0,
        )  # fmt: skip
        assert texts(found) == everything
        assert texts(client.get_all(filters=alice, latest_only=True)) == ["I moved to Nice"]
        current = client.get(nice)
        assert (current["lifecycle_state"], current["linked_memory_ids"]) == (
            "active",
            [lyon, paris["id"]],
        )
        assert (client.get(lyon)["lifecycle_state"], client.get(lyon)["replaced_by"]) == (
            "superseded",
            nice,
        )

        assert client.delete(nice, delete_linked=True) == {
            "message": "Memory deleted successfully!",
            "cascade_count": 2,
        }
        for memory_id in (paris["id"], lyon, nice):
            with pytest.raises(MemoryNotFoundError):
                client.get(memory_id)
        assert client.get_all(filters=alice, latest_only=False)["results"] == []

        # Without the flag the client sends none, and the answer has no cascade_count.
        (tea,) = add(client, ["I drink tea"], "alice")
        assert client.delete(tea["id"]) == {"message": "Memory deleted successfully!"}
    finally:
        client.client.close()


def test_one_add_naming_several_entities_is_found_by_each_through_the_client(
    live_api: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Mem0's cookbook "Partition Memories by Entity": one add with the four ids, then the
    # user's scope and the agent's scope searched each alone (as agent-framework-mem0 does).
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))
    from mem0 import MemoryClient

    key = make_key("acme", "client-entities")
    client = MemoryClient(host=live_api, api_key=key.raw)
    ids = {"user_id": "traveler_cam", "agent_id": "travel_planner"}
    ids |= {"run_id": "tokyo-2025-weekend", "app_id": "concierge_app"}
    said = "I'm Cam. Keep in mind I avoid shellfish and prefer boutique hotels."
    messages = [
        {"role": "user", "content": said},
        {"role": "assistant", "content": "Noted! I'll use those preferences in future trips."},
    ]
    user_scope = {"AND": [{f: ids[f]} for f in ("user_id", "app_id", "run_id")]}
    agent_scope = {"AND": [{f: ids[f]} for f in ("agent_id", "app_id")]}
    each: list[dict[str, Any]] = [user_scope, agent_scope, *({f: v} for f, v in ids.items())]

    def texts(found: dict[str, Any]) -> set[str]:
        return {item["memory"] for item in found["results"]}

    try:
        assert client.add(messages, infer=False, **ids)["status"] == "SUCCEEDED"
        for filters in each:
            found = client.search("Any dietary restrictions?", filters=filters, threshold=0.0)
            assert said in texts(found), filters
            assert said in texts(client.get_all(filters=filters)), filters
        assert texts(client.get_all(filters={"agent_id": "chef_recommender"})) == set()

        # Extracted (infer=True, the default): the worker's memories carry the four ids too.
        client.delete_all(app_id="concierge_app")
        event = client.add(messages, **ids)
        process_event(event["event_id"], key.key.project_id, OfflineExtractor())
        extracted = texts(client.get_all(filters={"user_id": "traveler_cam"}))
        assert extracted
        for filters in each:
            assert texts(client.get_all(filters=filters)) == extracted, filters
            found = client.search("Any dietary restrictions?", filters=filters, threshold=0.0)
            assert texts(found) == extracted, filters
    finally:
        client.client.close()
