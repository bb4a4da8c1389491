"""The worker's actor: retries through the event row (re-queuing its own message), then FAILED."""

from __future__ import annotations

from collections.abc import Iterator

import dramatiq
import pytest
from django.test import override_settings

from memory.extraction.tasks import process_event
from memory.models import Memory, MemoryEvent
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.fake_anthropic import FakeClaude, Reply

FACT = Reply({"facts": [{"text": "User likes tea", "confidence": 1, "positions": [0]}]})
ADD = Reply({"decisions": [{"fact": 0, "event": "ADD", "text": "User likes tea"}]})
SCOPE = {"user_id": "alice", "agent_id": None, "app_id": None, "run_id": None}


class TasksTestCase(BaseTestCase):
    @pytest.fixture(autouse=True)
    def _claude(self, fake_claude: FakeClaude) -> Iterator[None]:
        self.fake = fake_claude
        with override_settings(
            ENGRAM_EXTRACTOR="claude", ANTHROPIC_API_KEY="sk-test",
            ANTHROPIC_BASE_URL=fake_claude.url,
            ENGRAM_LLM_MAX_RETRIES=1, ENGRAM_LLM_TIMEOUT=1, ENGRAM_EVENT_MAX_ATTEMPTS=2,
        ):  # fmt: skip
            yield

    def setUp(self) -> None:
        self.project = self.alice.key.project
        payload = {"messages": [{"role": "user", "content": "I like tea"}], "scope": SCOPE}
        with project_context(self.project.pk):
            self.event = MemoryEvent.objects.create(project=self.project, payload=payload, **SCOPE)

    def run_actor(self, *, retry: bool = False) -> MemoryEvent:
        """One delivery of the event's message; `retry`: the actor must ask for another."""
        if retry:
            with pytest.raises(dramatiq.Retry):
                process_event(str(self.event.id), str(self.project.pk))
        else:
            process_event(str(self.event.id), str(self.project.pk))
        with project_context(self.project.pk):
            return MemoryEvent.objects.get(pk=self.event.pk)

    def test_it_retries_a_rate_limit_inside_one_attempt(self) -> None:
        self.fake.script(Reply(status=429, error_type="rate_limit_error"), FACT, ADD)
        done = self.run_actor()
        assert (done.status, done.attempts, done.extractor) == ("SUCCEEDED", 1, "claude")

    def test_it_puts_a_failed_attempt_back_and_fails_after_the_last(self) -> None:
        self.fake.script(*[Reply(status=529, error_type="overloaded_error")] * 4)
        first = self.run_actor(retry=True)
        assert (first.status, first.attempts) == ("PENDING", 1)
        assert first.error
        last = self.run_actor()
        assert (last.status, last.attempts) == ("FAILED", 2)
        with project_context(self.project.pk):
            assert not Memory.objects.exists()

    def test_it_fails_after_timeouts(self) -> None:
        self.fake.script(*[Reply({"facts": []}, delay=2)] * 4)
        self.run_actor(retry=True)
        failed = self.run_actor()
        assert failed.status == "FAILED"
        assert "Timeout" in failed.error
