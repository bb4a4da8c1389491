"""A delete of a scope covers the add requests sent before it that the worker has not processed
yet (found from outside, issue #50: `delete_all` while a user's add was queued was undone by
the worker, which then stored the messages the user had asked to forget). Through the REST
API and the entity delete (the MCP tool: tests/memory/test_mcp.py); a request already being
processed loses its claim and applies nothing."""

from __future__ import annotations

import uuid

import pytest

from memory.extraction.claims import LostClaimError, claim
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.pipeline import process_event, run
from memory.models import DELETED_BEFORE_PROCESSING, Memory, MemoryEvent
from tenants.db import project_context
from tests.base import BaseTestCase


class DeleteBeforeProcessingTestCase(BaseTestCase):
    def queue(self, text: str, **scope: str) -> uuid.UUID:
        body = {"messages": [{"role": "user", "content": text}], "async_mode": True, **scope}
        answer = self.call("post", "/v1/memories/", body)
        assert answer.status_code == 200, answer.content
        return uuid.UUID(answer.json()[0]["event_id"])

    def event(self, event_id: uuid.UUID) -> MemoryEvent:
        with project_context(self.alice.key.project_id):
            return MemoryEvent.objects.get(pk=event_id)

    def process(self, event_id: uuid.UUID) -> None:
        process_event(event_id, self.alice.key.project_id, OfflineExtractor())

    def texts(self, **scope: str) -> list[str]:
        with project_context(self.alice.key.project_id):
            rows = Memory.objects.filter(state="active", **scope)
            return sorted(rows.values_list("text", flat=True))

    def test_a_delete_all_covers_the_adds_queued_before_it(self) -> None:
        mine = self.queue("I live in Lisbon and I love surfing.", user_id="alice")
        bobs = self.queue("I live in Oslo.", user_id="bob")
        deleted = self.call("delete", "/v1/memories/?user_id=alice")
        assert deleted.status_code == 200, deleted.content
        ended = self.event(mine)
        assert (ended.status, ended.results, ended.warning) == (
            "SUCCEEDED",
            [],
            DELETED_BEFORE_PROCESSING,
        )
        self.process(mine)  # the queued message reaches the worker: nothing to do
        self.process(bobs)
        assert self.texts(user_id="alice") == []
        assert self.texts(user_id="bob") != []  # another user's request is processed
        assert self.event(bobs).warning == ""
        polled = self.call("get", f"/v1/event/{mine}/").json()
        assert polled["status"] == "SUCCEEDED" and polled["results"] == []
        # An add sent after the delete is stored as usual.
        later = self.queue("I live in Porto.", user_id="alice")
        self.process(later)
        assert self.texts(user_id="alice") != []

    def test_a_request_being_processed_loses_its_claim_and_applies_nothing(self) -> None:
        mine = self.queue("I live in Lisbon.", user_id="alice")
        claimed = claim(mine, self.alice.key.project_id)  # a worker took it
        assert claimed is not None
        assert self.call("delete", "/v1/memories/?user_id=alice").status_code == 200
        with pytest.raises(LostClaimError):  # it goes on: its claim is gone, it stops
            run(claimed, OfflineExtractor())  # (the worker's attempt() drops the event)
        assert self.texts(user_id="alice") == []
        assert self.event(mine).warning == DELETED_BEFORE_PROCESSING

    def test_the_entity_delete_covers_them_too(self) -> None:
        tutor = self.queue("I teach maths.", user_id="carol", agent_id="tutor")
        coach = self.queue("I run marathons.", user_id="carol", agent_id="coach")
        answer = self.call("delete", "/v2/entities/agent/tutor/")
        assert answer.status_code == 200, answer.content
        assert self.event(tutor).warning == DELETED_BEFORE_PROCESSING
        assert self.event(coach).status == "PENDING"  # another agent's
        assert self.call("delete", "/v1/memories/?agent_id=coach&user_id=carol").status_code == 200
        assert self.event(coach).warning == DELETED_BEFORE_PROCESSING
        # Another project's request of the same ids is untouched.
        with project_context(self.charlie.key.project_id):
            other = MemoryEvent.objects.create(
                project=self.charlie.key.project,
                payload={"messages": [], "scope": {"user_id": "alice"}},
                user_id="alice",
            )
        assert self.call("delete", "/v1/memories/?user_id=alice").status_code == 200
        with project_context(self.charlie.key.project_id):
            assert MemoryEvent.objects.get(pk=other.pk).status == "PENDING"
