"""Events that fail every time end FAILED, each with at most one queue message, never in a loop.

Issue #7: a failure inside the claim's transaction used to roll the claim back, so the attempt
never counted and the actor re-sent the event forever (and the sweeper started more chains).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

import dramatiq
import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from dramatiq_postgres import PostgresBroker

from memory.extraction import pipeline
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.llm.types import Context, Decisions, Existing, Fact, Usage
from memory.extraction.tasks import process_event
from memory.models import Memory, MemoryEvent
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import make_key
from tests.fake_anthropic import FakeClaude, Reply
from tests.memory.test_events import start_worker, stop, wait_for

SCOPE = {"user_id": "alice", "agent_id": None, "app_id": None, "run_id": None}
FACT = Reply({"facts": [{"text": "User likes tea", "confidence": 1, "positions": [0]}]})
ADD = Reply({"decisions": [{"fact": 0, "event": "ADD", "text": "User likes tea"}]})
YEAR_10000 = 253_402_300_800  # a Unix timestamp past 9999-12-31: datetime cannot hold it


def payload(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "I like tea"}], "scope": SCOPE, **extra}


def messages(event_id: uuid.UUID) -> list[tuple[str, str]]:
    """(message id, state) of every queue row that carries `event_id`, in any queue."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT message_id::text, state::text FROM dramatiq.queue "
            "WHERE message->>'actor_name' = 'process_event' AND message->'args'->>0 = %s",
            [str(event_id)],
        )
        return [(row[0], row[1]) for row in cursor.fetchall()]


def queue_sql(statement: str, *params: Any) -> None:
    """Run SQL on the queue through the broker's own connections (committed at once)."""
    broker = dramatiq.get_broker()
    assert isinstance(broker, PostgresBroker)
    with broker.pool.connection() as conn:
        conn.execute(statement, params)


def drop_messages(*event_ids: uuid.UUID) -> None:
    queue_sql(
        "DELETE FROM dramatiq.queue WHERE message->'args'->>0 = ANY(%s)",
        [str(e) for e in event_ids],
    )


class PoisonEventsTestCase(BaseTestCase):
    @pytest.fixture(autouse=True)
    def _claude(self, fake_claude: FakeClaude) -> Iterator[None]:
        self.fake = fake_claude
        with override_settings(
            ENGRAM_EXTRACTOR="claude", ANTHROPIC_API_KEY="sk-test",
            ANTHROPIC_BASE_URL=fake_claude.url,
            ENGRAM_LLM_MAX_RETRIES=0, ENGRAM_LLM_TIMEOUT=5, ENGRAM_EVENT_MAX_ATTEMPTS=3,
        ):  # fmt: skip
            yield

    def setUp(self) -> None:
        self.project = self.alice.key.project

    def event(self, **fields: Any) -> MemoryEvent:
        fields.setdefault("payload", payload())
        with project_context(self.project.pk):
            event = MemoryEvent.objects.create(project=self.project, **SCOPE, **fields)
        # Messages the broker committed outlive this test's transaction: remove them.
        self.addCleanup(drop_messages, event.id)
        return event

    def reload(self, event: MemoryEvent) -> MemoryEvent:
        with project_context(self.project.pk):
            return MemoryEvent.objects.get(pk=event.pk)

    def run_actor(self, event: MemoryEvent, *, retry: bool = False) -> MemoryEvent:
        """One delivery of the event's message; `retry`: the actor must ask for another."""
        if retry:
            with pytest.raises(dramatiq.Retry):
                process_event(str(event.id), str(self.project.pk))
        else:
            process_event(str(event.id), str(self.project.pk))
        return self.reload(event)

    def sweep(self) -> None:
        call_command("sweep_events", pending_seconds=60, verbosity=0)

    def test_it_fails_at_once_an_event_that_breaks_while_building_its_context(self) -> None:
        done = self.run_actor(self.event(payload=payload(timestamp=YEAR_10000)))
        assert (done.status, done.attempts) == ("FAILED", 1)
        assert "year 10000 is out of range" in done.error
        assert done.lease_until is None
        assert self.fake.requests == []  # no model call for a payload that cannot work

    def test_it_fails_at_once_a_malformed_payload(self) -> None:
        done = self.run_actor(self.event(payload={"scope": SCOPE}))
        assert (done.status, done.attempts) == ("FAILED", 1)
        assert "KeyError('messages')" in done.error

    def test_it_fails_at_once_an_event_that_breaks_while_applying(self) -> None:
        self.fake.script(FACT, ADD)
        done = self.run_actor(self.event(payload=payload(expiration_date="not a date")))
        assert (done.status, done.attempts, done.results) == ("FAILED", 1, [])
        assert "not a date" in done.error
        with project_context(self.project.pk):
            assert not Memory.objects.exists()

    def test_it_counts_every_other_failure_and_fails_after_the_last_attempt(self) -> None:
        def broken(*args: Any) -> Context:
            raise RuntimeError("broken context")

        event = self.event()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(pipeline, "build_context", broken)
            first = self.run_actor(event, retry=True)
            assert (first.status, first.attempts, first.claim_id) == ("PENDING", 1, None)
            assert "broken context" in first.error
            self.run_actor(event, retry=True)
            last = self.run_actor(event)
        assert (last.status, last.attempts) == ("FAILED", 3)
        assert "broken context" in last.error

    def test_it_fails_an_event_whose_worker_died_during_its_last_attempt(self) -> None:
        expired = timezone.now() - timedelta(seconds=1)
        event = self.event(status="RUNNING", attempts=3, lease_until=expired)
        done = self.run_actor(event)
        assert (done.status, done.attempts) == ("FAILED", 3)
        assert "lease" in done.error
        assert self.fake.requests == []

    def test_it_releases_only_its_own_claim(self) -> None:
        event = self.event()
        stale = pipeline.claim(event.id, self.project.pk)
        assert stale is not None
        with project_context(self.project.pk):  # its lease runs out; another worker claims
            MemoryEvent.objects.filter(pk=event.pk).update(lease_until=timezone.now())
        current = pipeline.claim(event.id, self.project.pk)
        assert current is not None and current.token != stale.token
        before = self.reload(event)
        assert pipeline.release(stale, RuntimeError("late failure")) is None
        assert not pipeline.mark_failed(stale, "late failure")
        with pytest.raises(pipeline.LostClaimError):
            pipeline.renew(stale)
        after = self.reload(event)
        assert (after.status, after.attempts, after.error) == ("RUNNING", 2, "")
        assert (after.claim_id, after.lease_until) == (current.token, before.lease_until)

    def test_it_renews_the_lease(self) -> None:
        event = self.event()
        claim = pipeline.claim(event.id, self.project.pk)
        assert claim is not None
        old = timezone.now() - timedelta(hours=1)
        with project_context(self.project.pk):
            MemoryEvent.objects.filter(pk=event.pk).update(lease_until=old)
        pipeline.renew(claim)
        renewed = self.reload(event).lease_until
        assert renewed is not None and renewed > timezone.now() > old

    def test_it_renews_the_lease_before_each_model_call(self) -> None:
        event = self.event(payload=payload(messages=[
            {"role": "user", "content": "Hi! I love hiking in the Alps."}]))  # fmt: skip
        extractor = LeaseWatchingExtractor(self.project.pk, event.id)
        claim = pipeline.claim(event.id, self.project.pk)
        assert claim is not None
        extractor.expire()
        pipeline.run(claim, extractor)
        assert self.reload(event).status == "SUCCEEDED"
        assert extractor.calls == ["extract"]  # nothing stored near the fact: no decide call
        # Each call found the lease renewed, past the expired one it was left with.
        assert all(lease > EXPIRED for lease in extractor.leases), extractor.leases

    def test_it_stops_without_a_retry_when_another_worker_took_the_event(self) -> None:
        event = self.event()
        extractor = TakeoverExtractor(self.project.pk, event.id)
        assert pipeline.attempt(event.id, self.project.pk, extractor) is None  # no retry
        assert extractor.takeover is not None
        after = self.reload(event)
        assert (after.status, after.attempts) == ("RUNNING", 2)
        assert after.claim_id == extractor.takeover.token
        with project_context(self.project.pk):
            assert not Memory.objects.exists()

    def test_the_sweeper_leaves_an_event_whose_message_is_queued(self) -> None:
        event = self.old_event()
        process_event.send(str(event.id), str(self.project.pk))
        queued = messages(event.id)
        self.sweep()
        assert messages(event.id) == queued and len(queued) == 1

    def test_the_sweeper_leaves_an_event_whose_retry_is_delayed(self) -> None:
        event = self.old_event()
        process_event.send_with_options(args=(str(event.id), str(self.project.pk)), delay=600_000)
        delayed = messages(event.id)
        self.sweep()
        assert messages(event.id) == delayed and len(delayed) == 1

    def test_the_sweeper_leaves_an_event_whose_message_a_worker_holds(self) -> None:
        event = self.old_event()
        process_event.send(str(event.id), str(self.project.pk))
        queue_sql(
            "UPDATE dramatiq.queue SET state = 'consumed', worker_id = %s "
            "WHERE message->'args'->>0 = %s",
            uuid.uuid4(), str(event.id),
        )  # fmt: skip
        self.sweep()
        assert [state for _, state in messages(event.id)] == ["consumed"]

    def test_the_sweeper_resends_an_event_whose_message_is_gone(self) -> None:
        event = self.old_event()
        process_event.send(str(event.id), str(self.project.pk))
        [(lost, _)] = messages(event.id)
        drop_messages(event.id)
        self.sweep()
        [(resent, state)] = messages(event.id)
        assert (resent != lost, state) == (True, "queued")
        self.sweep()  # a second pass finds it queued now
        assert messages(event.id) == [(resent, "queued")]

    def test_the_sweeper_resends_an_abandoned_event_once(self) -> None:
        expired = timezone.now() - timedelta(seconds=1)
        event = self.event(status="RUNNING", attempts=1, lease_until=expired)
        self.sweep()
        self.sweep()
        assert [state for _, state in messages(event.id)] == ["queued"]

    def old_event(self) -> MemoryEvent:
        event = self.event()
        with project_context(self.project.pk):  # older than the sweeper's patience
            MemoryEvent.objects.filter(pk=event.pk).update(
                created_at=timezone.now() - timedelta(minutes=5)
            )
        return event


EXPIRED = datetime(2000, 1, 1, tzinfo=UTC)


class LeaseWatchingExtractor(OfflineExtractor):
    """The offline extractor, noting the event's lease at each model call, then expiring it."""

    def __init__(self, project_id: uuid.UUID, event_id: uuid.UUID) -> None:
        self.project_id, self.event_id = project_id, event_id
        self.calls: list[str] = []
        self.leases: list[Any] = []

    def expire(self) -> None:
        with project_context(self.project_id):
            MemoryEvent.objects.filter(pk=self.event_id).update(lease_until=EXPIRED)

    def _watch(self, call: str) -> None:
        with project_context(self.project_id):
            self.leases.append(MemoryEvent.objects.get(pk=self.event_id).lease_until)
        self.expire()
        self.calls.append(call)

    def extract(self, context: Context) -> tuple[list[Fact], Usage]:
        self._watch("extract")
        return super().extract(context)

    def decide(
        self,
        facts: Sequence[Fact],
        existing: Sequence[Sequence[Existing]],
        observed_on: date | None = None,
    ) -> tuple[Decisions, Usage]:
        self._watch("decide")
        return super().decide(facts, existing, observed_on)


class TakeoverExtractor(OfflineExtractor):
    """While this worker waits for the model, its lease runs out and another worker claims."""

    def __init__(self, project_id: uuid.UUID, event_id: uuid.UUID) -> None:
        self.project_id, self.event_id = project_id, event_id
        self.takeover: pipeline.Claim | None = None

    def extract(self, context: Context) -> tuple[list[Fact], Usage]:
        with project_context(self.project_id):
            MemoryEvent.objects.filter(pk=self.event_id).update(lease_until=timezone.now())
        self.takeover = pipeline.claim(self.event_id, self.project_id)
        return super().extract(context)


def test_a_worker_fails_poison_events_with_one_message_each(
    committed_db: None, fake_claude: FakeClaude
) -> None:
    """Through a real worker: a payload that cannot work, and a model that is always down."""
    fake_claude.script(Reply(status=529, error_type="overloaded_error", repeat=True))
    project = make_key("acme", "poison").key.project
    with project_context(project.pk):
        poison, overloaded = (
            MemoryEvent.objects.create(project=project, payload=body, **SCOPE)
            for body in (payload(timestamp=YEAR_10000), payload())
        )
    events = (poison.id, overloaded.id)
    for event_id in events:
        process_event.send(str(event_id), str(project.pk))
    seen: dict[uuid.UUID, set[str]] = {e: set() for e in events}
    most = dict.fromkeys(events, 0)

    def finished() -> bool:
        rows = {e: messages(e) for e in events}
        for event_id, found in rows.items():
            seen[event_id] |= {message_id for message_id, _ in found}
            most[event_id] = max(most[event_id], len(found))
        with project_context(project.pk):
            open_ = MemoryEvent.objects.filter(status__in=["PENDING", "RUNNING"]).exists()
        return not open_ and not any(rows.values())

    worker = start_worker(
        ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=fake_claude.url,
        ENGRAM_LLM_MAX_RETRIES="0", ENGRAM_EVENT_MAX_ATTEMPTS="3", ENGRAM_EVENT_BACKOFF_MS="50",
    )  # fmt: skip
    try:
        assert wait_for(finished, seconds=120), seen
    finally:
        stop(worker)
    with project_context(project.pk):
        done = {e.id: e for e in MemoryEvent.objects.all()}
    assert (done[poison.id].status, done[poison.id].attempts) == ("FAILED", 1)
    assert "out of range" in done[poison.id].error
    assert (done[overloaded.id].status, done[overloaded.id].attempts) == ("FAILED", 3)
    assert "overloaded" in done[overloaded.id].error.lower()
    # Each retry re-queued the event's one message; nothing ever sent a second one.
    assert most == dict.fromkeys(events, 1)
    assert all(len(ids) == 1 for ids in seen.values()), seen
    call_command("sweep_events", verbosity=0)
    assert not any(messages(e) for e in events)
