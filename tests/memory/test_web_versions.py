"""A memory's versions on the operator's memory page (memory/web/versions.py): newest first,
word-level differences, what caused each, and restoring an earlier one as a new version."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import User
from django.test import override_settings

from memory import actions, graph
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.pipeline import process_event
from memory.models import Memory, MemoryEvent, MemoryHistory, ProfileSettings
from memory.web.versions import Piece, versions, word_diff
from tenants.db import project_context
from tests.factory import add_texts
from tests.memory.test_web_memories import TeamTestCase

SCOPE = {"user_id": "alice", "agent_id": None, "app_id": None, "run_id": None}


class VersionsTestCase(TeamTestCase):
    def said(self, text: str) -> MemoryEvent:
        with project_context(self.project.pk):
            payload = {"messages": [{"role": "user", "content": text}], "scope": SCOPE}
            event = MemoryEvent.objects.create(project=self.project, payload=payload, **SCOPE)
        process_event(event.id, self.project.pk, OfflineExtractor())
        return event

    def current(self) -> Memory:
        with project_context(self.project.pk):
            return Memory.objects.get(state="active")

    def url(self, memory: Memory, suffix: str = "") -> str:
        return f"/dashboard/p/{self.project.pk}/memories/{memory.pk}/{suffix}"

    def test_the_difference_is_word_by_word(self) -> None:
        assert word_diff("I live in Austin.", "I live in Porto, Portugal.") == [
            Piece("same", "I live in "),
            Piece("removed", "Austin."),
            Piece("added", "Porto, Portugal."),
        ]
        assert word_diff("same text", "same text") == [Piece("same", "same text")]

    def test_the_lineage_newest_first_with_its_causes(self) -> None:
        self.said("I live in Austin.")
        moved = self.said("I live in Porto.")
        memory = self.current()
        actions.do_update_memory(
            memory, actor=actions.Actor("user", "owen"), text="I live in Porto, Portugal."
        )
        with project_context(self.project.pk):
            found = versions(self.project.pk, Memory.objects.get(pk=memory.pk))
        assert [(v.text, v.current) for v in found] == [
            ("I live in Porto, Portugal.", True),
            ("I live in Porto.", False),
            ("I live in Austin.", False),
        ]
        assert found[0].cause == "owen, in the dashboard"
        assert found[1].cause == "an add request, decided by the offline extractor"
        assert found[1].event_id == moved.id
        assert Piece("removed", "Austin.") in found[1].pieces
        assert Piece("added", "Porto, Portugal.") in found[0].pieces

    def test_the_page_shows_the_versions_and_restores_one(self) -> None:
        self.said("I live in Austin.")
        self.said("I live in Porto.")
        memory = self.current()
        self.client.force_login(self.owner)
        page = self.client.get(self.url(memory))
        assert page.status_code == 200
        shown = page.context["versions"]
        assert [v.text for v in shown] == ["I live in Porto.", "I live in Austin."]
        austin = shown[1]
        answer = self.client.post(self.url(memory, f"versions/{austin.history_id}/restore/"))
        assert answer.status_code == 302
        restored = self.current()
        assert (restored.pk, restored.text) == (memory.pk, "I live in Austin.")
        with project_context(self.project.pk):
            last = MemoryHistory.objects.filter(memory_id=memory.pk).order_by("-created_at")[0]
        assert (last.event, last.actor, last.old_memory) == (
            "UPDATE",
            "user:owen",
            "I live in Porto.",
        )
        # A reader may look, not change; an unknown version is a 404.
        self.client.force_login(self.reader)
        refused = self.client.post(self.url(memory, f"versions/{shown[0].history_id}/restore/"))
        assert refused.status_code == 403
        assert self.current().text == "I live in Austin."
        self.client.force_login(self.owner)
        missing: Any = self.client.post(self.url(memory, f"versions/{memory.pk}/restore/"))
        assert missing.status_code == 404

    def test_the_event_page_reverts_after_a_confirmation(self) -> None:
        lived = self.said("I live in Austin.")
        moved = self.said("I live in Porto.")
        event_url = f"/dashboard/p/{self.project.pk}/events/{moved.pk}/"
        self.client.force_login(self.reader)
        assert b"Revert this add request" not in self.client.get(event_url).content
        assert self.client.get(f"{event_url}revert/").status_code == 403
        self.client.force_login(self.owner)
        assert b"Revert this add request" in self.client.get(event_url).content
        confirm = self.client.get(f"{event_url}revert/")
        assert confirm.status_code == 200
        assert b"What it did" in confirm.content and b"I live in Porto." in confirm.content
        assert self.current().text == "I live in Porto."  # a GET changes nothing
        done = self.client.post(f"{event_url}revert/", follow=True)
        assert b"Reverted: 1 memory deleted, 1 restored." in done.content
        assert b"Reverted</dt>" in done.content and b"user:owen" in done.content
        assert self.current().text == "I live in Austin."
        # The first request's memory was changed by the second: refused, and said why.
        refused = self.client.post(
            f"/dashboard/p/{self.project.pk}/events/{lived.pk}/revert/", follow=True
        )
        assert b"was changed after this add request" in refused.content
        assert self.current().text == "I live in Austin."
        unknown = f"/dashboard/p/{self.project.pk}/events/{uuid.uuid4()}/revert/"
        assert self.client.get(unknown).status_code == 404
        assert self.client.post(unknown).status_code == 404

    def test_the_events_page_names_the_extractor_that_runs(self) -> None:
        self.client.force_login(self.reader)
        url = f"/dashboard/p/{self.project.pk}/events/"
        with override_settings(ENGRAM_EXTRACTOR="offline"):
            offline = self.client.get(url).content.decode()
        assert "extracted by the offline extractor" in offline and "claude-" not in offline
        with override_settings(ENGRAM_EXTRACTOR="claude", ENGRAM_LLM_MODEL="claude-test-1"):
            claude = self.client.get(url).content.decode()
        assert "extracted by Claude, model <code>claude-test-1</code>" in claude
        with override_settings(ENGRAM_EXTRACTOR="openai", ENGRAM_LLM_MODEL="qwen3:8b"):
            local = self.client.get(url).content.decode()
        assert "extracted by an OpenAI-compatible endpoint, model <code>qwen3:8b</code>" in local


class DashboardLabelsTestCase(VersionsTestCase):
    """Issue #50, part 3: what the pages call things (items 3, 4, 11 and 12)."""

    def test_a_memory_stored_as_sent_has_no_add_request_link(self) -> None:
        with project_context(self.project.pk):
            (memory,) = add_texts(self.project, ["I keep bees."], user_id="alice")
        self.client.force_login(self.reader)
        page = self.client.get(self.url(memory)).content.decode()
        (version,) = self.client.get(self.url(memory)).context["versions"]
        assert version.event_id is None  # its request id names no stored event: no 404 link
        assert ">add request</a>" not in page
        # A model's memory links its event.
        self.said("I live in Austin.")
        with project_context(self.project.pk):
            extracted = Memory.objects.get(text="I live in Austin.")
        linked = self.client.get(self.url(extracted)).content.decode()
        assert ">add request</a>" in linked

    def test_a_superseded_memory_shows_only_its_own_texts_and_none_is_current(self) -> None:
        self.said("I live in Austin.")
        self.said("I live in Porto.")
        with project_context(self.project.pk):
            old = Memory.objects.get(text="I live in Austin.")
        assert old.state == "superseded"
        self.client.force_login(self.reader)
        shown = self.client.get(self.url(old)).context["versions"]
        assert [(v.text, v.current) for v in shown] == [("I live in Austin.", False)]
        # Deleted: its last text is kept, not "current".
        memory = self.current()
        actions.do_delete_memory(memory, actor=actions.Actor("user", "owen"))
        with project_context(self.project.pk):
            deleted = Memory.objects.get(pk=memory.pk)
        page = self.client.get(self.url(deleted))
        assert not any(v.current for v in page.context["versions"])
        assert b"<strong>current</strong>" not in page.content

    def test_a_reverted_request_says_so_in_the_list_the_page_and_the_filter(self) -> None:
        self.said("I live in Austin.")
        moved = self.said("I live in Porto.")
        events = f"/dashboard/p/{self.project.pk}/events/"
        self.client.force_login(self.owner)
        self.client.post(f"{events}{moved.pk}/revert/")
        page = self.client.get(f"{events}{moved.pk}/").content.decode()
        assert '<span class="badge status-reverted">REVERTED</span>' in page
        assert page.count('<span class="badge status-reverted">undone</span>') == 1
        listed = self.client.get(events).content.decode()
        assert listed.count(">REVERTED</span>") == 1
        reverted = self.client.get(events, {"status": "REVERTED"}).context["page"].object_list
        succeeded = self.client.get(events, {"status": "SUCCEEDED"}).context["page"].object_list
        assert [e.pk for e in reverted] == [moved.pk]
        assert moved.pk not in [e.pk for e in succeeded] and len(succeeded) == 1

    def test_empty_lists_and_unknown_users_say_so(self) -> None:
        self.client.force_login(self.reader)
        memories = f"/dashboard/p/{self.project.pk}/memories/"
        empty = self.client.get(memories, {"user_id": "nobody"}).content.decode()
        assert "<h2>No memories</h2>" in empty and "0 memories" not in empty
        with project_context(self.project.pk):
            ProfileSettings.objects.create(
                project=self.project,
                enabled=True,
                schema={"properties": {"drink": {"type": "string", "description": "Drink"}}},
            )
            add_texts(self.project, ["I drink tea."], user_id="alice")
        assert b"Not built yet" in self.client.get(memories, {"user_id": "alice"}).content
        assert b"Not built yet" not in self.client.get(memories, {"user_id": "nobody"}).content

    def test_the_admin_says_memories(self) -> None:
        assert str(Memory._meta.verbose_name_plural) == "memories"
        assert str(MemoryHistory._meta.verbose_name_plural) == "memory histories"
        self.client.force_login(
            User.objects.create_superuser("root", email="root@example.com", password="pw")
        )
        page = self.client.get("/admin/memory/memory/").content.decode()
        assert "0 memories" in page and "memorys" not in page

    def test_the_memory_page_numbers_messages_from_one(self) -> None:
        self.said("I live in Austin.")
        self.client.force_login(self.reader)
        page = self.client.get(self.url(self.current())).content.decode()
        assert '<ol class="messages-list">' in page and 'start="0"' not in page


class GraphThroughEditsTestCase(TeamTestCase):
    """Issue #50 (part 3, item 2): an edit names the graph facts it ends, the memory page lists
    them, and making the old text current again brings them back."""

    def test_edit_warns_with_the_facts_and_restoring_the_version_brings_them_back(self) -> None:
        [memory] = add_texts(self.project, ["Alice lives in Berlin"], user_id="alice")
        alice = graph.Scope(user_id="alice")
        graph.upsert_relation(
            self.project.pk, "alice", "lives in", "berlin", alice, memory_id=memory.pk
        )
        self.client.force_login(self.owner)
        url = f"/dashboard/p/{self.project.pk}/memories/{memory.pk}/"
        page = self.client.get(url)
        assert [(f.relation.phrase(), f.state) for f in page.context["facts"]] == [
            ("alice → lives_in → berlin", "backed")
        ]
        assert "those only it backs end" in page.content.decode()

        edited = self.client.post(
            url + "edit/", {"text": "Alice lives in Hamburg", "metadata": "{}"}, follow=True
        )
        [said] = edited.context["messages"]
        assert said.level_tag == "warning"
        assert "alice → lives_in → berlin" in str(said) and "brings them back" in str(said)
        [fact] = edited.context["facts"]
        assert (fact.relation.phrase(), fact.state) == ("alice → lives_in → berlin", "ended")
        assert "making that text current again" in fact.why
        assert graph.relations(self.project.pk, alice) == []

        berlin = next(v for v in edited.context["versions"] if v.text == "Alice lives in Berlin")
        restored = self.client.post(url + f"versions/{berlin.history_id}/restore/", follow=True)
        [said] = restored.context["messages"]
        assert said.level_tag == "success" and "hold again: alice → lives_in → berlin" in str(said)
        [fact] = restored.context["facts"]
        assert fact.state == "backed"
        [edge] = graph.relations(self.project.pk, alice)
        assert edge.memory_ids == [str(memory.pk)]
