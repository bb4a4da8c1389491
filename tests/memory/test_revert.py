"""Reverting an add request (POST /v1/event/{id}/revert/): what the model did, undone as a whole.

Events are processed as the worker processes them (pipeline.process_event, with the offline
extractor or the fake Claude), then reverted through the API; the last two run the real
worker (offline, then with the fake Claude deleting a memory).
"""

from __future__ import annotations

import uuid
from typing import Any

from memory.extraction.llm.offline import OfflineExtractor
from memory.models import Memory, MemoryEvent, MemoryHistory
from tenants.db import project_context
from tests.factory import auth, make_key
from tests.fake_anthropic import FakeClaude
from tests.memory.test_events import start_worker, stop, wait_for
from tests.memory.test_pipeline import ExtractionTestCase, decisions, facts


class RevertTestCase(ExtractionTestCase):
    def said(self, text: str, extractor: Any = None) -> MemoryEvent:
        """`text` said by alice, processed (by the offline extractor unless told)."""
        return self.run_event(self.event(text), extractor or OfflineExtractor())

    def revert(self, event: MemoryEvent, who: Any = None) -> Any:
        return self.call("post", f"/v1/event/{event.id}/revert/", who=who)

    def relations(self) -> dict[str, bool]:
        """alice's relations, "source relationship destination" -> valid."""
        body = self.call("get", "/v1/graph/?user_id=alice&include_invalid=true").json()
        return {
            f"{r['source']} {r['relationship']} {r['destination']}": r["valid"]
            for r in body["results"]
        }

    def history(self, memory_id: Any) -> list[tuple[str, str]]:
        with project_context(self.project.pk):
            rows = MemoryHistory.objects.filter(memory_id=memory_id).order_by("created_at")
            return [(row.event, row.actor) for row in rows]

    def test_it_reverts_a_move_with_its_graph(self) -> None:
        self.said("I live in Austin.")
        moved = self.said("I live in Porto.")
        assert self.active_texts() == {"I live in Porto."}
        before = self.relations()
        assert [k for k, valid in before.items() if valid and "live" in k] == [
            "alice lives_in porto"
        ]
        [austin] = self.memories(text="I live in Austin.")
        [porto] = self.memories(text="I live in Porto.")

        answer = self.revert(moved)
        assert answer.status_code == 200, answer.content
        body = answer.json()
        assert (body["id"], body["status"], body["reverted_by"]) == (
            str(moved.id),
            "REVERTED",
            f"api:{self.alice.key.prefix}",
        )
        assert [(r["id"], r["event"]) for r in body["results"]] == [
            (str(porto.id), "DELETE"),
            (str(austin.id), "RESTORE"),
        ]
        assert self.active_texts() == {"I live in Austin."}
        [austin] = self.memories(pk=austin.pk)
        assert (austin.state, austin.replaced_by_id) == ("active", None)
        assert self.memories(pk=porto.pk)[0].state == "deleted"
        after = self.relations()
        assert after["alice lives_in austin"] is True
        assert after["alice lives_in porto"] is False
        changed = {r["destination"] for r in body["relations"]["invalidated"]}
        back = {r["destination"] for r in body["relations"]["revalidated"]}
        assert (changed, back) == ({"porto"}, {"austin"})
        actor = f"api:{self.alice.key.prefix}"
        assert self.history(austin.pk)[-1] == ("REVERT", actor)
        assert self.history(porto.pk)[-1] == ("REVERT", actor)
        event = self.call("get", f"/v1/event/{moved.id}/").json()
        assert event["reverted_by"] == actor and event["reverted_at"] is not None
        # A search sees the old city again, and only it.
        search = self.call("post", "/v3/memories/search/", {
            "query": "Where do I live?", "filters": {"user_id": "alice"}, "threshold": 0,
        }).json()  # fmt: skip
        assert "I live in Porto." not in [r["memory"] for r in search["results"]]
        assert "I live in Austin." in [r["memory"] for r in search["results"]]

    def test_a_second_revert_answers_what_the_first_did(self) -> None:
        self.said("I live in Austin.")
        moved = self.said("I live in Porto.")
        first = self.revert(moved).json()
        rows = len(self.history(self.memories(text="I live in Austin.")[0].pk))
        again = self.revert(moved)
        assert again.status_code == 200
        assert again.json() == first
        assert len(self.history(self.memories(text="I live in Austin.")[0].pk)) == rows
        assert self.active_texts() == {"I live in Austin."}

    def test_it_reverts_the_models_delete_and_add(self) -> None:
        single = self.existing("User is single")
        self.fake.script(facts("User just got married"), decisions(
            {"fact": 0, "event": "DELETE", "id": "0"},
            {"fact": 0, "event": "ADD", "text": "User is married"},
        ))  # fmt: skip
        married = self.said("I just got married", self.model)
        assert self.active_texts() == {"User is married"}
        body = self.revert(married).json()
        assert sorted(r["event"] for r in body["results"]) == ["DELETE", "RESTORE"]
        assert self.active_texts() == {"User is single"}
        assert self.history(single.pk) == [
            ("ADD", "test:"),
            ("DELETE", f"extractor:{married.id}"),
            ("REVERT", f"api:{self.alice.key.prefix}"),
        ]

    def test_a_later_change_refuses_the_revert_and_changes_nothing(self) -> None:
        lived = self.said("I live in Austin.")
        moved = self.said("I live in Porto.")
        [austin] = self.memories(text="I live in Austin.")
        answer = self.revert(lived)
        assert answer.status_code == 409, answer.content
        body = answer.json()
        assert "nothing was reverted" in body["detail"]
        [conflict] = body["conflicts"]
        assert (conflict["memory_id"], conflict["change"], conflict["event_id"]) == (
            str(austin.id),
            "UPDATE",
            str(moved.id),
        )
        assert self.active_texts() == {"I live in Porto."}
        assert ("REVERT", f"api:{self.alice.key.prefix}") not in self.history(austin.pk)
        assert self.call("get", f"/v1/event/{lived.id}/").json()["reverted_at"] is None
        # A person's edit counts as a later change too.
        [porto] = self.memories(text="I live in Porto.")
        self.call("put", f"/v1/memories/{porto.id}/", {"text": "I live in Porto, Portugal."})
        refused = self.revert(moved)
        assert refused.status_code == 409
        assert refused.json()["conflicts"][0]["actor"] == f"api:{self.alice.key.prefix}"
        assert self.active_texts() == {"I live in Porto, Portugal."}

    def test_only_a_processed_event_of_the_project_can_be_reverted(self) -> None:
        pending = self.event("I like tea")
        answer = self.revert(pending)
        assert answer.status_code == 409
        assert "PENDING" in answer.json()["detail"]
        with project_context(self.project.pk):
            MemoryEvent.objects.filter(pk=pending.pk).update(status="FAILED", error="boom")
        assert self.revert(pending).status_code == 409
        done = self.said("I like green tea.")
        assert self.revert(done, who=self.charlie).status_code == 404
        assert self.active_texts() == {"I like green tea."}
        unknown = self.call("post", f"/v1/event/{uuid.uuid4()}/revert/")
        assert unknown.status_code == 404
        assert self.call("post", "/v1/event/not-a-uuid/revert/").status_code == 404
        assert self.call("get", f"/v1/event/{done.id}/revert/").status_code == 405

    def test_an_event_that_changed_nothing_reverts_to_nothing(self) -> None:
        self.said("I like green tea.")
        repeat = self.said("I like green tea.")
        body = self.revert(repeat).json()
        assert (body["status"], body["results"]) == ("REVERTED", [])
        assert self.active_texts() == {"I like green tea."}


def test_a_revert_through_the_api_with_a_real_worker(committed_db: None, client: Any) -> None:
    key = make_key("acme", "revert-worker")

    def add(text: str) -> str:
        body = {"messages": text, "user_id": "alice"}
        response = client.post(
            "/v3/memories/add/", body, content_type="application/json", headers=auth(key.raw)
        )
        event_id = str(response.json()["event_id"])

        def done() -> bool:
            answer = client.get(f"/v1/event/{event_id}/", headers=auth(key.raw)).json()
            return bool(answer["status"] == "SUCCEEDED")

        assert wait_for(done), f"event {event_id} was not processed"
        return event_id

    worker = start_worker()
    try:
        add("I work at Initech.")
        moved = add("I work at Globex.")
    finally:
        stop(worker)
    answer = client.post(f"/v1/event/{moved}/revert/", headers=auth(key.raw))
    assert answer.status_code == 200, answer.content
    listed = client.get("/v1/memories/?user_id=alice", headers=auth(key.raw)).json()
    assert [m["memory"] for m in listed] == ["I work at Initech."]
    with project_context(key.key.project_id):
        reverted = MemoryEvent.objects.get(pk=moved)
        assert reverted.reverted_at is not None
        assert Memory.objects.get(text="I work at Globex.").state == "deleted"


def test_the_models_delete_reverted_through_the_api_with_a_real_worker(
    committed_db: None, fake_claude: FakeClaude, client: Any
) -> None:
    """The worker applies a model's DELETE and ADD (the fake Claude answers), then the API
    reverts them: the deleted memory is back, the added one deleted."""
    fake_claude.script(
        facts("User just got married"),
        decisions(
            {"fact": 0, "event": "DELETE", "id": "0"},
            {"fact": 0, "event": "ADD", "text": "User is married"},
        ),
    )
    key = make_key("acme", "revert-claude")
    headers = auth(key.raw)
    raw = {"messages": "User is single", "user_id": "alice", "infer": False}
    client.post("/v3/memories/add/", raw, content_type="application/json", headers=headers)
    body = {"messages": "I just got married", "user_id": "alice"}
    event_id = client.post(
        "/v3/memories/add/", body, content_type="application/json", headers=headers
    ).json()["event_id"]

    def done() -> bool:
        answer = client.get(f"/v1/event/{event_id}/", headers=headers).json()
        return bool(answer["status"] == "SUCCEEDED")

    worker = start_worker(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=fake_claude.url)
    try:
        assert wait_for(done), f"event {event_id} was not processed"
    finally:
        stop(worker)
    listed = client.get("/v1/memories/?user_id=alice", headers=headers).json()
    assert [m["memory"] for m in listed] == ["User is married"]
    answer = client.post(f"/v1/event/{event_id}/revert/", headers=headers)
    assert answer.status_code == 200, answer.content
    assert sorted(r["event"] for r in answer.json()["results"]) == ["DELETE", "RESTORE"]
    listed = client.get("/v1/memories/?user_id=alice", headers=headers).json()
    assert [m["memory"] for m in listed] == ["User is single"]
