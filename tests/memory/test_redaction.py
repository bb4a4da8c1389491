"""Redaction of one memory: POST /v1/memories/{id}/redact/ (GDPR, issue #10).

The text leaves the memory and every copy of it; the skeleton (ids, scope, dates, history
rows, a REDACT row) stays. The scan of every table after a redaction is in
test_erasure_scan.py; these are the rules, one at a time.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import Q

from audit.models import PurgeRecord
from memory import actions, graph
from memory.actions import Actor, ImmutableMemoryError, NotRestorableError, erasure_subject_hash
from memory.models import (
    Feedback,
    IdempotentRequest,
    Memory,
    MemoryEntity,
    MemoryExport,
    MemoryHistory,
    content_hash,
)
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import auth

TEXT = "Alice's locker code is 4417"
MARKER = "[redacted]"


class RedactionTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project_id
        body = {"messages": [{"role": "user", "content": TEXT},
                             {"role": "user", "content": "Alice likes tea"}],
                "user_id": "alice", "infer": False, "metadata": {"source": "chat"}}  # fmt: skip
        added = self.call("post", "/v1/memories/", body).json()["results"]
        self.memory_id, self.tea_id = (uuid.UUID(r["id"]) for r in added)

    def redact(self, memory_id: uuid.UUID | None = None, **body: Any) -> Any:
        return self.call("post", f"/v1/memories/{memory_id or self.memory_id}/redact/", body)

    def memory(self, memory_id: uuid.UUID | None = None) -> Memory:
        with project_context(self.project):
            return Memory.objects.get(pk=memory_id or self.memory_id)

    def history(self) -> list[MemoryHistory]:
        with project_context(self.project):
            rows = MemoryHistory.objects.filter(memory_id=self.memory_id)
            return list(rows.order_by("created_at", "id"))

    def records(self) -> list[PurgeRecord]:
        with project_context(self.project):
            return list(PurgeRecord.objects.order_by("created_at"))

    def test_it_keeps_a_skeleton_without_the_text(self) -> None:
        response = self.redact(reason="ticket 12")
        assert response.status_code == 200, response.content
        assert response.json()["counts"]["memories"] == 1
        memory = self.memory()
        assert (memory.text, memory.state, memory.metadata) == (MARKER, "redacted", {})
        assert memory.user_id == "alice"
        assert not any(memory.embedding)  # the vector could be inverted: zeros
        assert memory.hash == content_hash(MARKER)

    def test_it_blanks_every_history_version_and_records_the_redaction(self) -> None:
        self.call("put", f"/v1/memories/{self.memory_id}/", {"text": f"{TEXT}, changed"})
        self.redact(reason="ticket 12")
        rows = self.history()
        assert [r.event for r in rows] == ["ADD", "UPDATE", "REDACT"]
        assert {r.old_memory for r in rows} == {None, MARKER}
        assert {r.new_memory for r in rows} == {None, MARKER}
        assert rows[0].input == [{"role": "user", "content": MARKER}]
        assert (rows[-1].actor, rows[-1].metadata) == (
            f"api:{self.alice.key.prefix}",
            {"reason": "ticket 12"},
        )
        api = self.call("get", f"/v1/memories/{self.memory_id}/history/").json()
        assert [r["event"] for r in api] == ["ADD", "UPDATE", "REDACT"]

    def test_it_writes_one_purge_record_without_the_text(self) -> None:
        counts = self.redact().json()["counts"]
        [record] = self.records()
        assert (record.subject_kind, record.counts) == ("memory", counts)
        assert record.subject_hash == erasure_subject_hash(
            self.project, "memory", str(self.memory_id)
        )
        assert TEXT not in str(record.__dict__)

    def test_it_hides_the_memory_from_reads_and_search(self) -> None:
        self.redact()
        assert self.call("get", f"/v1/memories/{self.memory_id}/").status_code == 404
        listed = self.call("get", "/v1/memories/?user_id=alice").json()
        assert [m["id"] for m in listed] == [str(self.tea_id)]
        found = self.call("post", "/v2/memories/search/", {
            "query": "locker code", "filters": {"user_id": "alice"}, "threshold": 0.0,
        }).json()  # fmt: skip
        assert str(self.memory_id) not in {m["id"] for m in found}

    def test_it_clears_the_neighbours_keyword_context(self) -> None:
        self.call("put", f"/v1/memories/{self.memory_id}/", {"text": "Alice has a locker"})
        assert self.memory(self.tea_id).context_before == TEXT  # the first wording
        counts = self.redact().json()["counts"]
        assert (counts["contexts"], self.memory(self.tea_id).context_before) == (1, "")

    def test_it_clears_the_context_of_neighbours_added_in_later_requests(self) -> None:
        """A turn-by-turn add quotes the previous turn of the conversation (memory 0018)."""
        body = {"messages": "Alice went home", "user_id": "alice", "infer": False}
        (later,) = self.call("post", "/v1/memories/", body).json()["results"]
        body = {"messages": "Then Alice slept", "user_id": "alice", "infer": False}
        self.call("post", "/v1/memories/", body)
        assert self.memory(uuid.UUID(later["id"])).context_before == "Alice likes tea"
        self.call("post", f"/v1/memories/{self.tea_id}/redact/", {})
        assert self.memory(uuid.UUID(later["id"])).context_before == ""
        with project_context(self.project):
            quoting = Memory.objects.filter(
                Q(context_before="Alice likes tea") | Q(context_after="Alice likes tea")
            )
            assert not quoting.exists()

    def test_it_blanks_every_wording_in_the_superseded_versions_history(self) -> None:
        older = self.memory()
        new = actions.NewMemory("Alice's locker code is 5521", older.embedding, older.scope, {}, [])
        newer = actions.do_supersede_memory(older, new, actor=Actor.command("test"))
        actions.do_update_memory(newer, actor=Actor.command("test"), text="Alice's code is 0")
        self.redact(newer.id)
        with project_context(self.project):
            update = MemoryHistory.objects.get(memory_id=older.id, event="UPDATE")
        assert (update.old_memory, update.new_memory) == (TEXT, MARKER)
        assert self.memory().text == TEXT  # the older version is another memory: kept

    def test_it_blanks_feedback_reasons_and_the_text_in_exports(self) -> None:
        given = {"memory_id": str(self.memory_id), "feedback": "POSITIVE"}
        self.call("post", "/v1/feedback/", {**given, "feedback_reason": TEXT})
        self.call("post", "/v1/exports/", {"filters": {"user_id": "alice"}})
        counts = self.redact().json()["counts"]
        assert (counts["feedback"], counts["exports"]) == (1, 1)
        with project_context(self.project):
            feedback = Feedback.objects.get(memory_id=self.memory_id)
            [export] = MemoryExport.objects.all()
        assert (feedback.feedback, feedback.feedback_reason) == ("POSITIVE", "")
        texts = {m["id"]: m["memory"] for m in export.result}
        assert texts == {str(self.memory_id): MARKER, str(self.tea_id): "Alice likes tea"}

    def test_it_deletes_an_answer_kept_for_idempotent_replays(self) -> None:
        body = {"messages": "Alice's PIN is 9321", "user_id": "alice", "infer": False}
        headers = {**auth(self.alice.raw), "Idempotency-Key": "pin-0001"}
        kept = self.client.post(
            "/v1/memories/", body, content_type="application/json", headers=headers
        )
        pin = uuid.UUID(kept.json()["results"][0]["id"])
        assert self.redact(pin).json()["counts"]["idempotency"] == 1
        with project_context(self.project):
            assert not IdempotentRequest.objects.exists()

    def test_it_deletes_the_graph_only_this_memory_backs(self) -> None:
        scope = graph.Scope(user_id="alice")
        for memory_id, place in ((self.memory_id, "gym locker"), (self.tea_id, "tea shop")):
            graph.upsert_relation(self.project, "alice", "uses", place, scope, memory_id=memory_id)
        shared = graph.upsert_relation(
            self.project, "alice", "visits", "tea shop", scope, memory_id=self.memory_id
        )
        graph.upsert_relation(
            self.project, "alice", "visits", "tea shop", scope, memory_id=self.tea_id
        )
        counts = self.redact().json()["counts"]
        left = {
            (r.relationship, r.destination, r.valid, tuple(r.memory_ids))
            for r in graph.relations(self.project, scope, include_invalid=True, limit=50)
        }
        assert left == {
            ("uses", "tea shop", True, (str(self.tea_id),)),
            ("visits", "tea shop", True, (str(self.tea_id),)),
        }
        assert counts["graph_relations"] == 2  # one deleted, one no longer citing it
        assert counts["graph_entities"] == 1  # "gym locker": no edge, no link left
        assert graph.find_entity(self.project, scope, "gym locker") is None
        assert shared.id in {r.id for r in graph.relations(self.project, scope, limit=50)}
        with project_context(self.project):
            assert not MemoryEntity.objects.filter(memory_id=self.memory_id).exists()

    def test_a_second_redaction_changes_nothing_and_is_recorded(self) -> None:
        self.redact()
        again = self.redact()
        assert again.status_code == 200
        assert set(again.json()["counts"].values()) == {0}
        assert [r.subject_kind for r in self.records()] == ["memory", "memory"]
        assert [r.event for r in self.history()].count("REDACT") == 1

    def test_it_redacts_deleted_superseded_and_immutable_memories(self) -> None:
        self.call("delete", f"/v1/memories/{self.memory_id}/")
        assert self.redact().status_code == 200
        assert self.memory().state == "redacted"
        body = {"messages": "A fixed fact", "user_id": "alice", "infer": False, "immutable": True}
        fixed = self.call("post", "/v1/memories/", body).json()["results"][0]["id"]
        assert self.redact(uuid.UUID(fixed)).status_code == 200
        assert self.memory(uuid.UUID(fixed)).text == MARKER

    def test_a_redacted_memory_cannot_change_or_come_back(self) -> None:
        self.redact()
        memory = self.memory()
        with pytest.raises(ImmutableMemoryError):
            actions.do_update_memory(memory, actor=Actor.command("test"), text="back")
        with pytest.raises(ImmutableMemoryError):
            actions.do_batch_delete([memory], actor=Actor.command("test"))
        with pytest.raises(NotRestorableError):
            actions.do_restore_memory(memory, actor=Actor.command("test"))
        assert self.call("delete", f"/v1/memories/{self.memory_id}/").status_code == 404

    def test_a_dry_run_counts_and_changes_nothing(self) -> None:
        counts = actions.do_redact_memory(self.memory(), actor="command:test", dry_run=True)
        assert (counts["memories"], counts["history"], counts["contexts"]) == (1, 1, 1)
        assert (self.memory().text, self.records()) == (TEXT, [])

    def test_it_validates_ownership(self) -> None:
        other = self.call("post", f"/v1/memories/{self.tea_id}/redact/", {}, who=self.charlie)
        assert other.status_code == 404
        assert self.call("post", f"/v1/memories/{uuid.uuid4()}/redact/", {}).status_code == 404
        assert self.memory(self.tea_id).text == "Alice likes tea"

    def test_it_refuses_a_long_reason(self) -> None:
        response = self.redact(reason="x" * 501)
        assert response.status_code == 400
        assert "reason" in response.json()["detail"]
        assert self.memory().text == TEXT

    def test_the_database_function_works_only_in_the_callers_tenant(self) -> None:
        subject = erasure_subject_hash(self.project, "memory", str(self.memory_id))
        statement = (
            "SELECT engram_erase_memories(%s, %s::uuid[], true, 'memory', %s, 't', '', false)"
        )
        for tenant in (self.charlie.key.project_id, None):
            with (
                pytest.raises(DatabaseError, match="tenant context"),
                transaction.atomic(),
                project_context(tenant),
                connection.cursor() as cursor,
            ):
                cursor.execute(statement, [self.project, [self.memory_id], subject])
        assert self.memory().text == TEXT
