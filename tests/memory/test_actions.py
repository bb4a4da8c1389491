"""The actions, called directly (no HTTP): the one way memory state changes.

Whoever calls them — the API, an extraction event, a management command, a dashboard — the
rows they write are the same, only the actor differs; and the rules hold for every caller.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from memory import actions, queries
from memory.actions import Actor, BatchUpdate, ImmutableMemoryError, NewMemory
from memory.extraction import decide
from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.pipeline import process_event
from memory.models import Memory, MemoryEvent, MemoryHistory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import UNIT, auth, make_memory
from tests.fake_anthropic import FakeClaude, Reply

SCOPE = {"user_id": "alice", "agent_id": None, "app_id": None, "run_id": None}
# What a history row says about the change, leaving out who made it and when.
SHAPE = ("event", "old_memory", "new_memory", "user_id", "agent_id", "app_id", "run_id",
         "metadata", "categories")  # fmt: skip


class ActionsTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project

    def memory(self, text: str, **kwargs: Any) -> Memory:
        with project_context(self.project.pk):
            return make_memory(self.project, text, **kwargs)

    def history(self, memory: Memory) -> list[MemoryHistory]:
        with project_context(self.project.pk):
            return list(MemoryHistory.objects.filter(memory_id=memory.id).order_by("created_at"))

    def reload(self, memory: Memory) -> Memory:
        with project_context(self.project.pk):
            return Memory.objects.get(pk=memory.pk)

    def test_it_records_who_made_each_change(self) -> None:
        staff = User.objects.create_user("sam")
        event_id = uuid.uuid4()
        tea = self.memory("User likes tea")
        actions.do_update_memory(tea, actor=Actor.staff(staff), text="User likes green tea",
                                 vector=UNIT)  # fmt: skip
        actions.do_delete_memory(tea, actor=Actor.end_user("alice"))
        actions.do_restore_memory(self.reload(tea), actor=Actor.command("fixup"))
        new = NewMemory(text="User likes oolong", vector=UNIT, scope=SCOPE, metadata={},
                        categories=["food"], source_event_id=event_id)  # fmt: skip
        oolong = actions.do_supersede_memory(
            self.reload(tea), new, actor=Actor.extraction(event_id)
        )
        rows = [(r.event, r.actor, r.old_memory, r.new_memory) for r in self.history(tea)]
        assert rows == [
            ("UPDATE", "user:sam", "User likes tea", "User likes green tea"),
            ("DELETE", "enduser:alice", "User likes green tea", None),
            ("RESTORE", "command:fixup", None, "User likes green tea"),
            ("UPDATE", f"extractor:{event_id}", "User likes green tea", "User likes oolong"),
        ]
        assert [(r.event, r.actor, r.event_id) for r in self.history(oolong)] == [
            ("ADD", f"extractor:{event_id}", event_id)
        ]
        superseded = self.reload(tea)
        assert (superseded.state, superseded.replaced_by_id) == ("superseded", oolong.id)

    def test_it_refuses_to_change_an_immutable_memory_whoever_asks(self) -> None:
        fixed = self.memory("User's birthday is 3 May", immutable=True)
        new = NewMemory(text="x", vector=UNIT, scope=SCOPE, metadata={}, categories=[])
        attempts: list[Callable[[], object]] = [
            lambda: actions.do_update_memory(fixed, actor=Actor.staff(User(username="s")),
                                             text="User's birthday is 4 May", vector=UNIT),
            lambda: actions.do_update_memory(fixed, actor=Actor.api_key(self.alice.key),
                                             metadata={"k": 1}),
            lambda: actions.do_batch_update([BatchUpdate(fixed, "y", None)],
                                            actor=Actor.api_key(self.alice.key)),
            lambda: actions.do_supersede_memory(fixed, new, actor=Actor.extraction(uuid.uuid4())),
            lambda: actions.do_delete_memory(fixed, actor=Actor.extraction(uuid.uuid4())),
        ]  # fmt: skip
        for attempt in attempts:
            with pytest.raises(ImmutableMemoryError):
                attempt()
        assert self.history(fixed) == []
        assert self.reload(fixed).text == "User's birthday is 3 May"
        # A person (or an application's key) may still delete it explicitly.
        actions.do_delete_memory(fixed, actor=Actor.api_key(self.alice.key))
        assert self.reload(fixed).state == "deleted"

    def test_it_restores_only_a_deleted_memory(self) -> None:
        tea = self.memory("User likes tea")
        with pytest.raises(actions.NotRestorableError):
            actions.do_restore_memory(tea, actor=Actor.command("fixup"))
        assert self.history(tea) == []

    def test_it_runs_in_the_memorys_tenant_whatever_context_the_caller_is_in(self) -> None:
        tea = self.memory("User likes tea")
        # Called from inside another tenant's context: the action switches to the memory's
        # project for its own transaction, then gives the caller its context back.
        with project_context(self.charlie.key.project_id):
            actions.do_update_memory(tea, actor=Actor.command("t"), metadata={"k": 1})
            assert queries.memories(self.charlie.key.project_id).count() == 0
            assert queries.get_memory(self.project.pk, tea.id) is None  # not visible here
        assert self.reload(tea).metadata == {"k": 1}

    def test_a_read_without_a_tenant_context_finds_nothing(self) -> None:
        tea = self.memory("User likes tea")
        actions.do_delete_memory(self.memory("User likes coffee"), actor=Actor.command("t"))
        # No project_context here: row-level security shows no rows, whatever is asked.
        assert queries.memories(self.project.pk).count() == 0
        assert queries.get_memory(self.project.pk, tea.id) is None
        assert queries.history(self.project.pk, tea.id) is None
        assert list(queries.events(self.project.pk)) == []
        rows, totals = queries.entities(self.project.pk)
        assert (list(rows), totals["total_users"]) == ([], 0)
        with project_context(self.project.pk):
            assert queries.memories(self.project.pk).count() == 2
            assert queries.get_memory(self.project.pk, tea.id) == tea
            assert [r.event for r in queries.history(self.project.pk, tea.id) or []] == []
            rows, totals = queries.entities(self.project.pk)
            assert [(r["kind"], r["entity"], r["total"]) for r in rows] == [("user", "alice", 1)]


class OneActionManyCallersTestCase(BaseTestCase):
    """A delete through the API, an extraction event and a command writes the same rows."""

    @pytest.fixture(autouse=True)
    def _claude(self, fake_claude: FakeClaude) -> None:
        self.fake = fake_claude

    def test_the_same_delete_writes_the_same_history_whoever_calls_it(self) -> None:
        project = self.alice.key.project
        yesterday = timezone.now().date() - timedelta(days=1)
        common = {"metadata": {"topic": "food"}, "categories": ["food"], "embedding": UNIT}

        # 1. An extraction event whose model decides DELETE (coffee: the one memory it is shown).
        with project_context(project.pk):
            by_model = make_memory(project, "User likes coffee", **common)
            event = MemoryEvent.objects.create(
                project=project,
                payload={"messages": [{"role": "user", "content": "I quit coffee"}],
                         "scope": SCOPE},
                **SCOPE,
            )  # fmt: skip
        self.fake.script(
            Reply({"facts": [{"text": "User quit coffee", "confidence": 1, "positions": [0]}]}),
            Reply({"decisions": [{"fact": 0, "event": "DELETE", "id": "0"}]}),
        )
        claude = ClaudeExtractor(api_key="k", base_url=self.fake.url, model="m", max_tokens=512,
                                 timeout=5, max_retries=0)  # fmt: skip
        # The memory's vector is synthetic (far from any text): show it to the model whatever.
        with mock.patch.object(decide, "SIMILARITY_FLOOR", -1):
            process_event(event.id, project.pk, claude)

        # 2. The API.
        with project_context(project.pk):
            by_api = make_memory(project, "User likes tea", **common)
            by_command = make_memory(project, "User likes cocoa", expiration_date=yesterday,
                                     **common)  # fmt: skip
        response = self.client.delete(f"/v1/memories/{by_api.id}/", headers=auth(self.alice.raw))
        assert response.status_code == 200

        # 3. A management command.
        call_command("purge_expired", verbosity=0)

        deleted = (by_model, by_api, by_command)
        with project_context(project.pk):
            rows = {r.memory_id: r for r in MemoryHistory.objects.filter(event="DELETE")}
            states = dict(Memory.objects.values_list("id", "state"))
        assert set(rows) == {m.id for m in deleted}
        assert {states[m.id] for m in deleted} == {"deleted"}
        for memory in deleted:
            assert tuple(getattr(rows[memory.id], f) for f in SHAPE) == (
                "DELETE", memory.text, None, "alice", None, None, None, {"topic": "food"},
                ["food"],
            )  # fmt: skip
        assert rows[by_model.id].actor == f"extractor:{event.id}"
        assert rows[by_model.id].event_id == event.id
        assert rows[by_api.id].actor == f"api:{self.alice.key.prefix}"
        assert rows[by_command.id].actor == "command:purge_expired"

    def test_purge_expired_counts_without_deleting_on_a_dry_run(self) -> None:
        project = self.alice.key.project
        with project_context(project.pk):
            yesterday = timezone.now().date() - timedelta(days=1)
            old = make_memory(project, "User's trip is on Monday", expiration_date=yesterday)
            make_memory(project, "User likes tea")
        call_command("purge_expired", "--dry-run", verbosity=0)
        with project_context(project.pk):
            assert Memory.objects.get(pk=old.pk).state == "active"
        call_command("purge_expired", verbosity=0)
        with project_context(project.pk):
            assert Memory.objects.get(pk=old.pk).state == "deleted"
            assert Memory.objects.filter(state="active").count() == 1
