"""Entities (list and delete), feedback, and memory exports."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone

from memory.models import Feedback, Memory, MemoryExport, MemoryHistory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import make_memory


class EntitiesExportsTestCase(BaseTestCase):
    def setUp(self) -> None:
        pid = self.alice.key.project_id
        self.start = timezone.now() - timedelta(days=1)

        def at(minutes: int, text: str, **fields: Any) -> Memory:
            return make_memory(
                pid, text, created_at=self.start + timedelta(minutes=minutes), **fields
            )

        with project_context(pid):
            self.tea = at(1, "User likes tea")
            self.rome = at(2, "User visited Rome")
            self.bot = at(3, "Bot note about alice", agent_id="bot")
            self.bob = at(4, "Bob buys shoes", user_id="bob")
            self.in_run = at(5, "Run note", user_id=None, agent_id="bot", run_id="r1")
            self.shop = at(6, "Shop banner", user_id=None, app_id="shop")
            self.gone = at(7, "Forgotten fact", state=Memory.State.DELETED)
            at(8, "Carol's forgotten fact", user_id="carol", state=Memory.State.DELETED)

    def test_it_counts_memories_per_entity(self) -> None:
        body = self.call("get", "/v1/entities/").json()
        assert [(e["type"], e["id"], e["name"], e["total_memories"]) for e in body["results"]] == [
            ("user", "alice", "alice", 3),
            ("user", "bob", "bob", 1),
            ("agent", "bot", "bot", 2),
            ("app", "shop", "shop", 1),
            ("run", "r1", "r1", 1),
        ]
        totals = [
            body[k] for k in ("count", "total_users", "total_agents", "total_apps", "total_runs")
        ]
        assert totals == [5, 2, 1, 1, 1]  # entities, not memories

    def test_it_dates_an_entity_by_its_memories(self) -> None:
        [agent] = [
            e for e in self.call("get", "/v1/entities/").json()["results"] if e["type"] == "agent"
        ]
        assert (agent["created_at"], agent["updated_at"]) == (
            self.bot.created_at.isoformat(),
            self.in_run.updated_at.isoformat(),
        )

    def test_it_does_not_count_deleted_memories(self) -> None:
        self.call("delete", f"/v1/memories/{self.bob.id}/")
        body = self.call("get", "/v1/entities/").json()
        names = [(e["type"], e["name"]) for e in body["results"]]
        assert ("user", "carol") not in names
        assert ("user", "bob") not in names
        assert body["total_users"] == 1

    def test_it_deletes_an_entitys_memories_with_history(self) -> None:
        response = self.call("delete", "/v2/entities/user/alice/")
        body = response.json()
        assert (response.status_code, body["message"], body["status"]) == (
            202,
            "Entity deleted successfully; 3 memories hidden, erasure queued.",
            "PENDING",
        )  # fmt: skip (a user is also erased by a worker: tests/memory/test_api_erasure.py)
        assert self.active_texts() == {"Bob buys shoes", "Run note", "Shop banner"}
        with project_context(self.alice.key.project_id):
            rows = MemoryHistory.objects.filter(event="DELETE").order_by("old_memory")
            deleted = [(r.memory_id, r.old_memory, r.new_memory, r.actor) for r in rows]
        actor = f"api:{self.alice.key.prefix}"
        assert deleted == [
            (self.bot.id, "Bot note about alice", None, actor),
            (self.tea.id, "User likes tea", None, actor),
            (self.rome.id, "User visited Rome", None, actor),
        ]

    def test_it_deletes_entities_through_the_v1_path(self) -> None:
        response = self.call("delete", "/v1/entities/agent/bot/")
        assert response.json()["message"] == "Entity deleted successfully; 2 memories deleted."
        remaining = {"User likes tea", "User visited Rome", "Bob buys shoes"}
        assert self.active_texts() == {*remaining, "Shop banner"}
        self.call("delete", "/v1/entities/run/r1/")  # already deleted: nothing more to do
        self.call("delete", "/v2/entities/app/shop/")
        assert self.active_texts() == remaining
        with project_context(self.alice.key.project_id):
            assert MemoryHistory.objects.filter(event="DELETE").count() == 3

    def test_it_refuses_an_unknown_entity_type(self) -> None:
        for path in ("/v2/entities/team/alice/", "/v1/entities/users/alice/"):
            response = self.call("delete", path)
            assert response.status_code == 400, path
            assert "Unknown entity type" in response.json()["detail"], path
        assert len(self.active_texts()) == 6

    def test_it_stores_feedback(self) -> None:
        body = {"memory_id": str(self.tea.id), "feedback": "POSITIVE", "feedback_reason": "spot on"}
        answer = self.call("post", "/v1/feedback/", body).json()
        with project_context(self.alice.key.project_id):
            row = Feedback.objects.get(pk=answer["id"])
        assert (row.memory_id, row.feedback, row.feedback_reason) == (
            self.tea.id,
            "POSITIVE",
            "spot on",
        )
        assert answer == {"id": str(row.id), "feedback": "POSITIVE", "feedback_reason": "spot on"}

    def test_it_upper_cases_lower_case_feedback(self) -> None:
        body = {"memory_id": str(self.rome.id), "feedback": "very_negative"}
        response = self.call("post", "/v1/feedback/", body)
        assert (response.status_code, response.json()["feedback"]) == (200, "VERY_NEGATIVE")
        with project_context(self.alice.key.project_id):
            assert Feedback.objects.get(memory_id=self.rome.id).feedback == "VERY_NEGATIVE"

    def test_it_refuses_unknown_feedback(self) -> None:
        response = self.call(
            "post", "/v1/feedback/", {"memory_id": str(self.tea.id), "feedback": "MEH"}
        )
        assert response.status_code == 400
        assert response.json()["detail"].startswith("feedback:")
        with project_context(self.alice.key.project_id):
            assert not Feedback.objects.exists()

    def test_it_answers_feedback_on_an_unknown_memory_with_404(self) -> None:
        for memory_id in (uuid.uuid4(), self.gone.id):
            body = {"memory_id": str(memory_id), "feedback": "NEGATIVE"}
            assert self.call("post", "/v1/feedback/", body).status_code == 404, memory_id
        with project_context(self.alice.key.project_id):
            assert not Feedback.objects.exists()

    def export(self, filters: dict[str, Any] | None) -> list[str]:
        """Create an export of `filters`; return the ids it holds, fetched back by its id."""
        created = self.call("post", "/v1/exports/", {"filters": filters})
        assert created.status_code == 201
        assert created.json()["message"] == "Memory export created."
        got = self.call("post", "/v1/exports/get/", {"memory_export_id": created.json()["id"]})
        assert got.json()["count"] == len(got.json()["results"])
        return [m["id"] for m in got.json()["results"]]

    def test_it_exports_exactly_the_memories_matching_the_filters(self) -> None:
        ids = {
            m.text: str(m.id)
            for m in (self.tea, self.rome, self.bot, self.bob, self.in_run, self.shop)
        }
        alices = [ids["User likes tea"], ids["User visited Rome"]]
        assert self.export({"user_id": "alice"}) == [*alices, ids["Bot note about alice"]]
        assert self.export({"user_id": "alice", "NOT": {"agent_id": "*"}}) == alices
        assert self.export({"user_id": "alice", "agent_id": "*"}) == [ids["Bot note about alice"]]
        notes = [ids["Bot note about alice"], ids["Run note"]]
        assert self.export({"keywords": {"icontains": "NOTE"}}) == notes  # no scope named
        assert self.export(None) == list(ids.values())  # every active memory, oldest first

    def test_it_stores_the_export_with_its_filters(self) -> None:
        body = {"schema": {"type": "object"}, "filters": {"user_id": "bob"}}
        export_id = self.call("post", "/v1/exports/", body).json()["id"]
        with project_context(self.alice.key.project_id):
            export = MemoryExport.objects.get(pk=export_id)
        assert (export.schema, export.filters) == ({"type": "object"}, {"user_id": "bob"})
        assert [m["memory"] for m in export.result] == ["Bob buys shoes"]

    def test_it_refuses_an_export_with_bad_filters(self) -> None:
        response = self.call("post", "/v1/exports/", {"filters": {"colour": "red"}})
        assert response.status_code == 400
        assert "colour" in response.json()["detail"]

    def test_it_gets_an_export_by_id(self) -> None:
        export_id = self.call("post", "/v1/exports/", {"filters": {"user_id": "bob"}}).json()["id"]
        body = self.call("post", "/v1/exports/get/", {"memory_export_id": export_id}).json()
        assert (body["id"], body["filters"], body["count"]) == (export_id, {"user_id": "bob"}, 1)
        assert body["results"][0]["memory"] == "Bob buys shoes"
        assert body["results"][0]["id"] == str(self.bob.id)

    def test_it_gets_an_export_by_filters(self) -> None:
        bobs = self.call("post", "/v1/exports/", {"filters": {"user_id": "bob"}}).json()["id"]
        self.call("post", "/v1/exports/", {"filters": {"user_id": "alice"}})
        body = self.call("post", "/v1/exports/get/", {"filters": {"user_id": "bob"}}).json()
        assert (body["id"], [m["memory"] for m in body["results"]]) == (bobs, ["Bob buys shoes"])

    def test_it_answers_an_unknown_export_with_404(self) -> None:
        self.call("post", "/v1/exports/", {"filters": {"user_id": "bob"}})
        for body in ({"memory_export_id": str(uuid.uuid4())}, {"filters": {"user_id": "zed"}}):
            response = self.call("post", "/v1/exports/get/", body)
            assert response.status_code == 404, body
            assert response.json()["detail"], body
