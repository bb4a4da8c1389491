"""purge_expired: expired memories deleted, deleted ones erased after their retention, old
add requests' payloads erased, per project, with purge records (GDPR, issue #10)."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any
from unittest import mock

from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from audit.models import PurgeRecord
from memory import actions
from memory.models import Memory, MemoryEvent, MemoryHistory
from tenants.db import project_context
from tenants.models import Project
from tests.base import BaseTestCase
from tests.factory import add_texts

MARKER = "[redacted]"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class PurgeExpiredTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project
        with project_context(self.project.pk):
            self.old, self.recent, self.kept = add_texts(
                self.project, ["Alice's old phone is 555", "Alice moved", "Alice likes tea"],
                user_id="alice",
            )  # fmt: skip
            for memory in (self.old, self.recent):
                actions.do_delete_memory(memory, actor="test:delete")
        self.age(self.old, days=40)
        self.age(self.recent, days=5)

    def age(self, memory: Memory, *, days: int) -> None:
        with project_context(memory.project_id):
            when = timezone.now() - timedelta(days=days)
            Memory.objects.filter(pk=memory.pk).update(updated_at=when)

    def purge(self, *args: str) -> str:
        out, err = io.StringIO(), io.StringIO()
        call_command("purge_expired", *args, stdout=out, stderr=err)
        assert err.getvalue() == ""  # no progress bar off a terminal
        return out.getvalue()

    def ids(self, **filters: Any) -> set[Any]:
        with project_context(self.project.pk):
            return set(Memory.objects.filter(**filters).values_list("pk", flat=True))

    def records(self) -> list[PurgeRecord]:
        with project_context(self.project.pk):
            return list(PurgeRecord.objects.order_by("created_at"))

    def event(self, *, days: int, status: str = "SUCCEEDED") -> MemoryEvent:
        with project_context(self.project.pk):
            event = MemoryEvent.objects.create(
                project=self.project, status=status, user_id="alice",
                payload={"messages": [{"role": "user", "content": "My phone is 555",
                                       "name": "Alice"}],
                         "scope": {"user_id": "alice"}, "metadata": {"chat": "42"}},
                results=[{"id": str(self.kept.pk), "memory": "Alice likes tea", "event": "ADD"}],
                usage={"calls": 2, "input_tokens": 10, "output_tokens": 5},
            )  # fmt: skip
            when = timezone.now() - timedelta(days=days)
            MemoryEvent.objects.filter(pk=event.pk).update(created_at=when)
        return event

    def reload(self, event: MemoryEvent) -> MemoryEvent:
        with project_context(self.project.pk):
            return MemoryEvent.objects.get(pk=event.pk)

    def test_it_erases_the_memories_deleted_before_the_retention_period(self) -> None:
        output = self.purge()
        assert self.ids() == {self.recent.pk, self.kept.pk}
        with project_context(self.project.pk):
            assert not MemoryHistory.objects.filter(memory_id=self.old.pk).exists()
            assert MemoryHistory.objects.filter(memory_id=self.recent.pk).count() == 2
        [record] = self.records()
        assert (record.subject_kind, record.actor) == ("retention", "command:purge_expired")
        assert (record.counts["memories"], record.counts["history"]) == (1, 2)
        assert "memories: 1\n" in output
        assert "erase 1 deleted memories" in output

    def test_expired_memories_are_deleted_then_erased_after_the_retention(self) -> None:
        with project_context(self.project.pk):
            yesterday = timezone.now().date() - timedelta(days=1)
            Memory.objects.filter(pk=self.kept.pk).update(expiration_date=yesterday)
        assert "expired: 1\n" in self.purge()
        assert self.kept.pk in self.ids(state="deleted")
        self.age(self.kept, days=31)
        self.purge()
        assert self.kept.pk not in self.ids()

    def test_a_project_sets_its_own_retention(self) -> None:
        Project.objects.filter(pk=self.project.pk).update(deleted_retention_days=0)
        self.purge()
        assert self.old.pk in self.ids()  # 0: kept for ever
        Project.objects.filter(pk=self.project.pk).update(deleted_retention_days=3)
        self.purge()
        assert self.ids() == {self.kept.pk}

    @override_settings(ENGRAM_DELETED_RETENTION_DAYS=60)
    def test_the_server_default_applies_to_a_project_without_its_own(self) -> None:
        self.purge()
        assert self.old.pk in self.ids()
        assert self.records() == []  # nothing erased: no record

    def test_it_erases_old_event_payloads_and_keeps_the_rows(self) -> None:
        old, pending, recent = (
            self.event(days=100), self.event(days=100, status="PENDING"), self.event(days=10)
        )  # fmt: skip
        self.purge()
        done = self.reload(old)
        assert done.payload["messages"] == [{"role": "user", "content": MARKER, "name": ""}]
        assert (done.payload["metadata"], done.payload["scope"]) == ({}, {"user_id": "alice"})
        assert "purged_at" in done.payload
        assert done.results == [{"id": str(self.kept.pk), "memory": MARKER, "event": "ADD"}]
        assert (done.status, done.usage["calls"]) == ("SUCCEEDED", 2)
        for untouched in (pending, recent):
            assert self.reload(untouched).payload == untouched.payload
        assert [r.counts for r in self.records()][-1] == {"events": 1, "history": 0}

    def test_a_dry_run_counts_and_changes_nothing(self) -> None:
        old = self.event(days=100)
        output = self.purge("--dry-run")
        assert "memories: 1\n" in output
        assert "would erase 1 deleted memories and the payloads of 1 add requests" in output
        assert self.old.pk in self.ids()
        assert self.reload(old).payload == old.payload
        assert self.records() == []

    def test_a_second_run_finds_nothing_and_records_nothing(self) -> None:
        self.event(days=100)
        self.purge()
        first = len(self.records())
        output = self.purge()
        assert "memories: 0\n" in output and "events: 0\n" in output
        assert len(self.records()) == first == 2

    def test_it_shows_a_progress_bar_on_a_terminal_unless_told_not_to(self) -> None:
        for args, shown in (((), True), (("--no-progress",), False)):
            terminal = Terminal()
            with mock.patch("sys.stderr", terminal):
                call_command("purge_expired", "--dry-run", *args, stdout=io.StringIO())
            assert ("projects: 100%" in terminal.getvalue()) is shown, terminal.getvalue()

    def test_a_memory_restored_since_it_was_listed_is_not_erased(self) -> None:
        counts = actions.do_purge_memories(self.project.pk, [self.kept.pk], actor="test:race")
        assert set(counts.values()) == {0}
        assert self.kept.pk in self.ids(state="active")
        assert self.records() == []

    def test_it_is_quiet_at_verbosity_zero(self) -> None:
        assert self.purge("--verbosity", "0", "--no-progress") == ""
        assert self.ids() == {self.recent.pk, self.kept.pk}

    def test_it_prunes_the_finished_webhook_deliveries_as_old_as_the_events(self) -> None:
        from webhooks.models import Delivery, Webhook

        with project_context(self.project.pk):
            hook = Webhook.objects.create(
                project=self.project, name="h", url="https://example.com/h",
                event_types=["memory_add"], secret="whsec_x",
            )  # fmt: skip
            made = {}
            for status, days in (("DELIVERED", 100), ("FAILED", 100), ("PENDING", 100),
                                 ("DELIVERED", 10)):  # fmt: skip
                row = Delivery.objects.create(
                    project=self.project, webhook=hook, event_type="memory_add", status=status,
                    next_attempt_at=timezone.now(),
                )  # fmt: skip
                Delivery.objects.filter(pk=row.pk).update(
                    created_at=timezone.now() - timedelta(days=days)
                )
                made[(status, days)] = row.pk
        assert "webhook deliveries: 2" in self.purge("--dry-run")
        assert "webhook deliveries: 2" in self.purge()
        with project_context(self.project.pk):
            left = set(Delivery.objects.values_list("pk", flat=True))
        assert left == {made[("PENDING", 100)], made[("DELIVERED", 10)]}
