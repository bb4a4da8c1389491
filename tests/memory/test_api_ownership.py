"""Project B's key can neither read nor change project A's memories, nor learn that they exist."""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar
from urllib.parse import urlencode

from memory.models import Feedback, Memory, MemoryHistory
from tenants.actions import NewApiKey
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth

COFFEE = "I love dark roast coffee in the morning"
ESPRESSO = "Alice's agent prefers espresso"


class OwnershipTestCase(BaseTestCase):
    """Alice (project A) and Charlie (project B) both keep COFFEE for a user called "alice"."""

    theirs: ClassVar[Memory]
    their_bot: ClassVar[Memory]
    own: ClassVar[Memory]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        a, b = cls.alice.key.project, cls.charlie.key.project
        with project_context(a.pk):
            [cls.theirs] = add_texts(a, [COFFEE], user_id="alice")
            [cls.their_bot] = add_texts(a, [ESPRESSO], user_id="alice", agent_id="alices-bot")
        with project_context(b.pk):
            [cls.own] = add_texts(b, [COFFEE], user_id="alice")

    def call_as(self, who: NewApiKey, method: str, path: str, body: Any = None) -> Any:
        return getattr(self.client, method)(
            path, body, content_type="application/json", headers=auth(who.raw)
        )

    def as_charlie(self, method: str, path: str, body: Any = None) -> Any:
        return self.call_as(self.charlie, method, path, body)

    def probe(
        self, method: str, path: str, body: Any = None, target: str | None = None
    ) -> tuple[tuple[int, str], tuple[int, str]]:
        """Charlie's answers with `{id}` (in path and body) set to Alice's id, then to a random one.

        Each answer is (status, body) with the id written back as `{id}`, so the two compare.
        """
        answers = []
        for some_id in (target or str(self.theirs.id), str(uuid.uuid4())):
            filled = json.loads(json.dumps(body).replace("{id}", some_id))
            response = self.as_charlie(method, path.replace("{id}", some_id), filled)
            answers.append(
                (response.status_code, response.content.decode().replace(some_id, "{id}"))
            )
        return answers[0], answers[1]

    def assert_untouched(self) -> None:
        """Alice's memories are exactly as stored: same text, active, nothing but ADD history."""
        stored = sorted([self.theirs, self.their_bot], key=lambda m: m.text)
        with project_context(self.alice.key.project_id):
            rows = list(
                Memory.objects.order_by("text").values_list(
                    "id", "text", "metadata", "state", "updated_at"
                )
            )
            events = sorted(MemoryHistory.objects.values_list("memory_id", "event"))
            feedback = Feedback.objects.count()
        assert rows == [(m.id, m.text, {}, "active", m.updated_at) for m in stored]
        assert events == sorted((m.id, "ADD") for m in stored)
        assert feedback == 0

    def own_text(self) -> tuple[str, str]:
        with project_context(self.charlie.key.project_id):
            memory = Memory.objects.get(pk=self.own.pk)
        return memory.text, memory.state

    def test_it_validates_ownership_of_get(self) -> None:
        theirs, unknown = self.probe("get", "/v1/memories/{id}/")
        assert theirs == unknown
        assert theirs[0] == 404
        assert json.loads(theirs[1])["detail"]

    def test_it_validates_ownership_of_update(self) -> None:
        theirs, unknown = self.probe("put", "/v1/memories/{id}/", {"text": "Charlie wrote this"})
        assert theirs == unknown
        assert theirs[0] == 404
        self.assert_untouched()
        seen_by_alice = self.call_as(self.alice, "get", f"/v1/memories/{self.theirs.id}/").json()
        assert seen_by_alice["memory"] == COFFEE

    def test_it_validates_ownership_of_delete(self) -> None:
        theirs, unknown = self.probe("delete", "/v1/memories/{id}/")
        assert theirs == unknown
        assert theirs[0] == 404
        self.assert_untouched()

    def test_it_validates_ownership_of_history(self) -> None:
        theirs, unknown = self.probe("get", "/v1/memories/{id}/history/")
        assert theirs == unknown
        assert theirs[0] == 404
        alices = self.call_as(self.alice, "get", f"/v1/memories/{self.theirs.id}/history/")
        assert [row["event"] for row in alices.json()] == ["ADD"]

    def test_it_validates_ownership_of_feedback(self) -> None:
        body = {"memory_id": "{id}", "feedback": "NEGATIVE", "feedback_reason": "wrong"}
        theirs, unknown = self.probe("post", "/v1/feedback/", body)
        assert theirs == unknown
        assert theirs[0] == 404
        self.assert_untouched()
        with project_context(self.charlie.key.project_id):
            assert not Feedback.objects.exists()

    def test_it_validates_ownership_of_batch_updates(self) -> None:
        items = [{"memory_id": str(self.own.id), "text": "mine, changed"}]
        body = {"memories": [*items, {"memory_id": "{id}", "text": "theirs, changed"}]}
        theirs, unknown = self.probe("put", "/v1/batch/", body)
        assert theirs == unknown
        assert theirs[0] == 400
        assert "{id}" in json.loads(theirs[1])["detail"]
        self.assert_untouched()
        assert self.own_text() == (COFFEE, "active")  # all or nothing

    def test_it_validates_ownership_of_batch_deletes(self) -> None:
        body = {"memories": [{"memory_id": str(self.own.id)}, {"memory_id": "{id}"}]}
        theirs, unknown = self.probe("delete", "/v1/batch/", body)
        assert theirs == unknown
        assert theirs[0] == 400
        self.assert_untouched()
        assert self.own_text() == (COFFEE, "active")

    def test_it_validates_ownership_of_lists(self) -> None:
        own = [str(self.own.id)]
        assert [
            m["id"] for m in self.as_charlie("post", "/v3/memories/", {}).json()["results"]
        ] == own
        v2 = self.as_charlie("post", "/v2/memories/", {"filters": {"user_id": "alice"}})
        assert [m["id"] for m in v2.json()] == own
        v1 = self.as_charlie("get", "/v1/memories/?user_id=alice")
        assert [m["id"] for m in v1.json()] == own
        ids = {"memory_ids": [str(self.theirs.id), str(self.their_bot.id)]}
        by_id = self.as_charlie("post", "/v3/memories/", {"filters": ids})
        assert (by_id.status_code, by_id.json()["results"]) == (200, [])

    def test_it_validates_ownership_of_search(self) -> None:
        body = {"query": "coffee in the morning", "filters": {"user_id": "alice"}}
        alices = self.call_as(self.alice, "post", "/v3/memories/search/", body).json()["results"]
        assert [r["id"] for r in alices][:1] == [str(self.theirs.id)]
        assert {r["id"] for r in alices} <= {str(self.theirs.id), str(self.their_bot.id)}
        for path in ("/v3/memories/search/", "/v2/memories/search/", "/v1/memories/search/"):
            answer = self.as_charlie("post", path, body).json()
            results = answer["results"] if path.startswith("/v3/") else answer
            assert [r["id"] for r in results] == [str(self.own.id)], path
        espresso = {"query": "espresso", "filters": {"user_id": "*", "agent_id": "*"}}
        assert self.as_charlie("post", "/v3/memories/search/", espresso).json()["results"] == []

    def test_it_validates_ownership_of_entities(self) -> None:
        def entities(who: NewApiKey) -> list[tuple[str, str, int]]:
            body = self.call_as(who, "get", "/v1/entities/").json()
            return [(e["type"], e["name"], e["total_memories"]) for e in body["results"]]

        assert entities(self.alice) == [("user", "alice", 2), ("agent", "alices-bot", 1)]
        assert entities(self.charlie) == [("user", "alice", 1)]
        body = self.as_charlie("get", "/v1/entities/").json()
        assert (body["count"], body["total_users"], body["total_agents"]) == (1, 1, 0)

    def test_it_validates_ownership_of_exports(self) -> None:
        cases = [
            ({}, [str(self.own.id)]),
            ({"user_id": "alice"}, [str(self.own.id)]),
            ({"memory_ids": [str(self.theirs.id), str(self.their_bot.id)]}, []),
        ]
        for filters, expected in cases:
            created = self.as_charlie("post", "/v1/exports/", {"filters": filters})
            assert created.status_code == 201, filters
            got = self.as_charlie(
                "post", "/v1/exports/get/", {"memory_export_id": created.json()["id"]}
            )
            assert [m["id"] for m in got.json()["results"]] == expected, filters

    def test_it_validates_ownership_of_export_reads(self) -> None:
        created = self.call_as(
            self.alice, "post", "/v1/exports/", {"filters": {"user_id": "alice"}}
        )
        export_id = created.json()["id"]
        theirs, unknown = self.probe(
            "post", "/v1/exports/get/", {"memory_export_id": "{id}"}, target=export_id
        )
        assert theirs == unknown
        assert theirs[0] == 404
        by_filters = self.as_charlie("post", "/v1/exports/get/", {"filters": {"user_id": "alice"}})
        latest = self.as_charlie("post", "/v1/exports/get/", {})
        assert (by_filters.status_code, latest.status_code) == (404, 404)
        alices = self.call_as(
            self.alice, "post", "/v1/exports/get/", {"memory_export_id": export_id}
        )
        assert [m["memory"] for m in alices.json()["results"]] == [COFFEE, ESPRESSO]

    def test_it_validates_ownership_of_bulk_deletes(self) -> None:
        queries = [
            {"user_id": "alice"},
            {"agent_id": "*"},
            {"user_id": "alice", "agent_id": "alices-bot"},
            {"filters": json.dumps({"memory_ids": [str(self.theirs.id)]})},
        ]
        counts = [
            self.as_charlie("delete", f"/v1/memories/?{urlencode(q)}").json()["deleted"]
            for q in queries
        ]
        assert counts == [1, 0, 0, 0]  # only Charlie's own memory
        assert self.own_text() == (COFFEE, "deleted")
        self.assert_untouched()

    def test_it_validates_ownership_of_entity_deletes(self) -> None:
        paths = ["/v2/entities/user/alice/", "/v1/entities/agent/alices-bot/"]
        messages = [self.as_charlie("delete", path).json()["message"] for path in paths]
        assert messages == [
            "Entity deleted successfully; 1 memories hidden, erasure queued.",
            "Entity deleted successfully; 0 memories deleted.",
        ]
        self.assert_untouched()

    def test_it_validates_ownership_of_duplicate_detection(self) -> None:
        body = {
            "messages": [{"role": "user", "content": ESPRESSO}],
            "user_id": "alice",
            "agent_id": "alices-bot",
            "infer": False,
        }
        [result] = self.as_charlie("post", "/v3/memories/add/", body).json()["results"]
        assert result["event"] == "ADD"  # not NONE: Alice's identical memory is invisible
        assert result["id"] != str(self.their_bot.id)
        self.assert_untouched()
