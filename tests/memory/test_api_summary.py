"""POST /v1/summary/: the running summaries of the scopes the filters match."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.pipeline import process_event, refresh_summary
from memory.models import MemoryEvent, ScopeSummary
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.fake_anthropic import FakeClaude, Reply


class SummaryTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project_id = self.alice.key.project_id
        self.summary("alice", "Alice plans a trip to Japan.")
        self.summary("alice", "Alice's chats with the travel bot.", agent_id="travel-bot")
        self.summary("bob", "Bob keeps bees.", days_ago=3)
        self.summary("bob", "", agent_id="empty")  # not written yet: never answered

    def summary(self, user_id: str, text: str, days_ago: int = 0, **scope: str) -> None:
        with project_context(self.project_id):
            row = ScopeSummary.objects.create(
                project_id=self.project_id, user_id=user_id, text=text, **scope
            )
            moment = timezone.now() - timedelta(days=days_ago)
            ScopeSummary.objects.filter(pk=row.pk).update(updated_at=moment)

    def summaries(self, filters: Any, **kwargs: Any) -> Any:
        return self.call("post", "/v1/summary/", {"filters": filters}, **kwargs)

    def test_it_answers_a_users_summaries_and_her_own_alone_when_asked(self) -> None:
        every = self.summaries({"user_id": "alice"}).json()
        assert [r["agent_id"] for r in every] == ["travel-bot", None]  # the most recent first
        response = self.summaries({"user_id": "alice", "NOT": {"agent_id": "*"}})
        assert response.status_code == 200
        [row] = response.json()
        assert {k: v for k, v in row.items() if k != "updated_at"} == {
            "user_id": "alice",
            "agent_id": None,
            "app_id": None,
            "run_id": None,
            "summary": "Alice plans a trip to Japan.",
        }

    def test_it_reads_the_filter_language(self) -> None:
        rows = self.summaries({"user_id": "alice", "agent_id": "*"}).json()
        assert [r["agent_id"] for r in rows] == ["travel-bot"]
        rows = self.summaries({"OR": [{"user_id": "bob"}, {"user_id": "alice"}]}).json()
        assert [r["summary"] for r in rows] == [
            "Alice's chats with the travel bot.",
            "Alice plans a trip to Japan.",
            "Bob keeps bees.",
        ]
        since = (timezone.now() - timedelta(days=1)).isoformat()
        rows = self.summaries({"user_id": "*", "updated_at": {"lt": since}}).json()
        assert [r["user_id"] for r in rows] == ["bob"]

    def test_it_answers_an_empty_list_for_a_scope_without_a_summary(self) -> None:
        assert self.summaries({"user_id": "carol"}).json() == []

    def test_it_validates_ownership(self) -> None:
        assert self.summaries({"user_id": "alice"}, who=self.charlie).json() == []

    def test_it_refuses_a_field_a_summary_does_not_have(self) -> None:
        for filters in (
            {"user_id": "alice", "categories": {"in": ["travel"]}},
            {"OR": [{"user_id": "alice"}, {"metadata": {"k": "v"}}]},
        ):
            response = self.summaries(filters)
            assert response.status_code == 400
            detail = response.json()["detail"]
            assert detail.startswith("filters: a summary has no"), detail

    def test_without_filters_it_answers_every_scopes_summary(self) -> None:
        """The Python client's get_summary() sends no filters at all."""
        answer = self.call("post", "/v1/summary/", {})
        assert answer.status_code == 200, answer.content
        assert [(s["user_id"], s["agent_id"], s["summary"]) for s in answer.json()] == [
            ("alice", "travel-bot", "Alice's chats with the travel bot."),
            ("alice", None, "Alice plans a trip to Japan."),
            ("bob", None, "Bob keeps bees."),
        ]  # the most recent first; bob's empty one not written yet

    def test_it_refuses_malformed_filters(self) -> None:
        assert self.summaries(["user_id"]).status_code == 400
        assert self.summaries({"user_id": {"gt": "a"}}).status_code == 400


class LiveSummaryTestCase(BaseTestCase):
    @pytest.fixture(autouse=True)
    def _claude(self, fake_claude: FakeClaude) -> None:
        self.fake = fake_claude
        self.claude = ClaudeExtractor(
            api_key="sk-test", base_url=fake_claude.url, model="claude-haiku-5-5",
            max_tokens=512, timeout=5, max_retries=0,
        )  # fmt: skip

    @override_settings(ENGRAM_SUMMARY_EVERY=1)
    def test_it_answers_the_summary_extraction_wrote(self) -> None:
        project = self.alice.key.project
        payload = {
            "messages": [{"role": "user", "content": "I'm planning a trip to Japan in April"}],
            "scope": {"user_id": "alice", "agent_id": None, "app_id": None, "run_id": None},
        }
        with project_context(project.pk):
            event = MemoryEvent.objects.create(project=project, payload=payload, user_id="alice")
        self.fake.script(
            Reply({"facts": []}), Reply({"summary": "Alice is planning an April trip to Japan."})
        )
        process_event(event.id, project.pk, self.claude)
        refresh_summary(event.id, project.pk, self.claude)
        rows = self.call("post", "/v1/summary/", {"filters": {"user_id": "alice"}}).json()
        assert [r["summary"] for r in rows] == ["Alice is planning an April trip to Japan."]
