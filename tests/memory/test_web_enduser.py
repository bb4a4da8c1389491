"""The end user's dashboard (/me/<token>/…): only their memories, corrections as "enduser",
deletion, the JSON download, erasure, and refused links."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any
from unittest import mock

from django.test import Client
from django.urls import reverse

from audit.models import ErasureRequest
from memory import actions, graph
from memory.models import Memory, MemoryEvent, MemoryHistory
from tenants import links
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, make_memory

NOW = 1_900_000_000


class EndUserDashboardTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project
        with project_context(self.project.pk):
            self.tea, self.oslo = add_texts(
                self.project, ["Alice likes green tea", "Alice lives in Oslo"], user_id="alice"
            )
            # Another agent's memory of the same user is theirs too.
            [self.dog] = add_texts(self.project, ["Alice has a dog"], user_id="alice", agent_id="x")
            [self.bob] = add_texts(self.project, ["Bob likes green tea"], user_id="bob")
        with project_context(self.charlie.key.project_id):
            [self.other] = add_texts(self.charlie.key.project, ["Alice of globex"], user_id="alice")
        self.token, _ = links.mint(self.alice.key, "alice", 3600)

    def url(self, name: str, token: str | None = None, **kwargs: Any) -> str:
        return reverse(f"web:enduser_{name}", kwargs={"token": token or self.token, **kwargs})

    def memory(self, memory: Memory) -> Memory:
        with project_context(memory.project_id):
            return Memory.objects.get(pk=memory.pk)

    def history(self, memory: Memory) -> list[MemoryHistory]:
        with project_context(memory.project_id):
            return list(MemoryHistory.objects.filter(memory_id=memory.pk).order_by("created_at"))

    # --- reading ---------------------------------------------------------------------------

    def test_it_lists_the_users_memories_of_every_agent_and_nothing_else(self) -> None:
        page = self.client.get(self.url("home"))
        assert page.status_code == 200
        texts = {m.text for m in page.context["page"].object_list}
        assert texts == {"Alice likes green tea", "Alice lives in Oslo", "Alice has a dog"}
        assert b"Bob likes" not in page.content and b"globex" not in page.content
        assert b"/dashboard/" not in page.content  # no operator link

    def test_the_list_costs_a_fixed_number_of_queries(self) -> None:
        # 1 the minting key; then the tenant transaction (a savepoint inside the test's):
        # 2 savepoint, 3 set the project, 4 count, 5 the recently deleted, 6 the project,
        # 7 the profile settings (profiles off: no profile read), 8 the page of memories,
        # 9 the project reset (outer context), 10 release
        with self.assertNumQueries(10):
            self.client.get(self.url("home"))

    def test_it_counts_the_memories_and_says_changed_only_of_changed_ones(self) -> None:
        # Issue #50: a memory stored with an older timestamp (updated_at after created_at) was
        # "changed" though no one changed it; an edited one is.
        with project_context(self.project.pk):
            Memory.objects.filter(pk=self.oslo.pk).update(
                created_at=self.oslo.created_at - timedelta(days=3)
            )
        fixed = self.client.post(
            self.url("correct", memory_id=self.tea.pk), {"text": "Alice likes tea"}
        )
        assert fixed.status_code == 302
        page = self.client.get(self.url("home")).content.decode()
        assert "All your memories: 3</h2>" in page
        assert page.count(", changed ") == 1
        edited = page.index("Alice likes tea")
        assert page.index(", changed ", edited) < page.index("Where it came from", edited)
        # None left: said so, not "All your memories".
        token, _ = links.mint(self.alice.key, "nobody-yet", 3600)
        empty = self.client.get(self.url("home", token=token)).content.decode()
        assert "No memory is kept for you</h2>" in empty

    def test_it_searches_the_users_memories_only(self) -> None:
        page = self.client.get(self.url("home"), {"q": "green tea"})
        found = [m.text for m in page.context["page"].object_list]
        assert found[0] == "Alice likes green tea"
        assert "Bob likes green tea" not in found

    def test_it_says_when_nothing_remembered_is_about_the_search(self) -> None:
        page = self.client.get(self.url("home"), {"q": "What is my blood type?"})
        assert list(page.context["page"].object_list) == []
        assert b"No memory is about this" in page.content

    def test_it_paginates(self) -> None:
        with project_context(self.project.pk):
            for n in range(25):
                make_memory(self.project, f"fact {n}", user_id="alice")
        second = self.client.get(self.url("home"), {"page": "2"}).context["page"]
        assert (second.number, len(second.object_list), second.paginator.count) == (2, 8, 28)

    def test_it_shows_the_messages_a_memory_came_from(self) -> None:
        with project_context(self.project.pk):
            event = MemoryEvent.objects.create(
                project=self.project,
                user_id="alice",
                payload={
                    "messages": [
                        {"role": "user", "content": "I adopted a cat called Tom", "name": ""},
                        {"role": "assistant", "content": "Lovely!", "name": ""},
                    ]
                },
            )
            cat = make_memory(
                self.project, "Alice has a cat", source_event_id=event.id, source_positions=[0]
            )
        page = self.client.get(self.url("memory", memory_id=cat.id))
        assert [(s["text"], s["used"]) for s in page.context["sources"]] == [
            ("I adopted a cat called Tom", True),
            ("Lovely!", False),
        ]
        # A message stored verbatim has no request row: its ADD history row kept it.
        verbatim = self.client.get(self.url("memory", memory_id=self.tea.id)).context["sources"]
        assert [s["text"] for s in verbatim] == ["Alice likes green tea"]

    # --- changing --------------------------------------------------------------------------

    def test_a_correction_is_re_embedded_and_recorded_as_the_end_user(self) -> None:
        before = self.memory(self.oslo)
        response = self.client.post(
            self.url("correct", memory_id=self.oslo.id), {"text": "Alice lives in Bergen"}
        )
        assert response.status_code == 302
        after = self.memory(self.oslo)
        assert after.text == "Alice lives in Bergen"
        assert list(after.embedding) != list(before.embedding)
        last = self.history(self.oslo)[-1]
        assert (last.event, last.actor, last.old_memory) == (
            "UPDATE", "enduser:alice", "Alice lives in Oslo"
        )  # fmt: skip
        assert b"Alice lives in Bergen" in self.client.get(response["Location"]).content

    def test_a_correction_names_the_facts_it_ends_and_undoing_it_brings_them_back(self) -> None:
        # Issue #50 (part 3, item 2): the graph follows the text through a correction.
        alice = graph.Scope(user_id="alice")
        graph.upsert_relation(self.project.pk, "alice", "lives in", "oslo", alice,
                              memory_id=self.oslo.pk)  # fmt: skip
        fixed = self.client.post(
            self.url("correct", memory_id=self.oslo.id), {"text": "Alice lives in Bergen"},
            follow=True,
        )  # fmt: skip
        said = [str(m) for m in fixed.context["messages"]]
        assert len(said) == 1 and "alice → lives_in → oslo" in said[0], said
        assert [r.valid for r in graph.relations(self.project.pk, alice)] == []
        back = self.client.post(
            self.url("correct", memory_id=self.oslo.id), {"text": "Alice lives in Oslo"},
            follow=True,
        )  # fmt: skip
        said = [str(m) for m in back.context["messages"]]
        assert "hold again: alice → lives_in → oslo" in said[0], said
        [edge] = graph.relations(self.project.pk, alice)
        assert edge.memory_ids == [str(self.oslo.pk)]

    def test_a_bad_correction_is_refused_on_the_page(self) -> None:
        for text in ("", "a\x00b", "x" * 100_000):
            page = self.client.post(self.url("correct", memory_id=self.oslo.id), {"text": text})
            assert page.status_code == 400
            assert page.context["form"].errors
        assert self.memory(self.oslo).text == "Alice lives in Oslo"

    def test_the_memory_page_shows_its_versions_newest_first(self) -> None:
        self.client.post(
            self.url("correct", memory_id=self.oslo.id), {"text": "Alice lives in Bergen"}
        )
        page = self.client.get(self.url("memory", memory_id=self.oslo.id))
        found = [(v.text, v.cause, v.current) for v in page.context["versions"]]
        assert found == [
            ("Alice lives in Bergen", "you", True),
            ("Alice lives in Oslo", "someone", False),  # the tests store as "test"
        ]
        assert b"<del>Oslo</del><ins>Bergen</ins>" in page.content
        assert b"Its versions" in page.content
        # One version only: no list.
        single = self.client.get(self.url("memory", memory_id=self.tea.id))
        assert b"Its versions" not in single.content

    def test_an_immutable_memory_cannot_be_corrected(self) -> None:
        with project_context(self.project.pk):
            fixed = make_memory(self.project, "Alice was born in 1990", immutable=True)
        page = self.client.post(self.url("correct", memory_id=fixed.id), {"text": "1991"})
        assert page.status_code == 400
        assert b"immutable" in page.content
        assert self.memory(fixed).text == "Alice was born in 1990"

    def test_it_deletes_one_memory(self) -> None:
        response = self.client.post(self.url("delete", memory_id=self.dog.id))
        assert response.status_code == 302
        assert self.memory(self.dog).state == Memory.State.DELETED
        assert self.history(self.dog)[-1].actor == "enduser:alice"
        assert self.client.get(self.url("memory", memory_id=self.dog.id)).status_code == 404

    def test_a_delete_is_confirmed_first_and_says_what_it_means(self) -> None:
        confirm = self.client.get(self.url("delete", memory_id=self.dog.id))
        assert confirm.status_code == 200
        page = confirm.content.decode()
        assert "hides it at once" in page and "kept for 30 days" in page
        assert "Erase it for good now" in page
        assert self.memory(self.dog).state == Memory.State.ACTIVE  # a GET changes nothing
        self.project.deleted_retention_days = 0
        self.project.save(update_fields=["deleted_retention_days"])
        kept = self.client.get(self.url("delete", memory_id=self.dog.id)).content.decode()
        assert "until you erase it for good" in kept

    def test_a_deleted_memory_is_listed_and_can_be_brought_back(self) -> None:
        self.client.post(self.url("delete", memory_id=self.dog.id))
        home = self.client.get(self.url("home"))
        assert [d["memory"].id for d in home.context["deleted"]] == [self.dog.id]
        assert b"Recently deleted" in home.content and b"Undo the delete" in home.content
        response = self.client.post(self.url("restore", memory_id=self.dog.id))
        assert response.status_code == 302
        assert self.memory(self.dog).state == Memory.State.ACTIVE
        assert [(h.event, h.actor) for h in self.history(self.dog)][-2:] == [
            ("DELETE", "enduser:alice"),
            ("RESTORE", "enduser:alice"),
        ]
        assert self.client.get(self.url("home")).context["deleted"] == []
        # Someone else's memory, or another project's, is not theirs to bring back.
        for other in (self.bob, self.other):
            assert self.client.post(self.url("restore", memory_id=other.id)).status_code == 404

    def test_only_the_users_own_deletes_are_undone_by_them(self) -> None:
        # Issue #50: the application's and support staff's deletes were offered "Undo".
        with project_context(self.project.pk):
            actions.do_delete_memory(self.oslo, actor=actions.Actor("api", "eng_abc"))
            actions.do_delete_memory(self.tea, actor=actions.Actor("user", "olga"))
        self.client.post(self.url("delete", memory_id=self.dog.id))
        home = self.client.get(self.url("home"))
        shown = {d["memory"].id: (d["by"], d["mine"]) for d in home.context["deleted"]}
        assert shown == {
            self.oslo.id: ("the application", False),
            self.tea.id: ("support staff", False),
            self.dog.id: ("you", True),
        }
        page = home.content.decode()
        assert page.count("Undo the delete<span") == 1
        assert "by the application" in page and "by support staff" in page
        refused = self.client.post(self.url("restore", memory_id=self.oslo.id), follow=True)
        assert b"deleted by the application: only a delete you made" in refused.content
        assert self.memory(self.oslo).state == Memory.State.DELETED
        self.client.post(self.url("restore", memory_id=self.dog.id))
        assert self.memory(self.dog).state == Memory.State.ACTIVE

    def test_a_memory_can_be_erased_for_good_at_once(self) -> None:
        confirm = self.client.get(self.url("erase_memory", memory_id=self.tea.id))
        assert confirm.status_code == 200 and b"cannot be undone" in confirm.content
        assert self.memory(self.tea).state == Memory.State.ACTIVE
        response = self.client.post(self.url("erase_memory", memory_id=self.tea.id))
        assert response.status_code == 302
        erased = self.memory(self.tea)
        assert (erased.state, erased.text) == (Memory.State.REDACTED, "[redacted]")
        assert all("green tea" not in (h.old_memory or "") for h in self.history(self.tea))
        # A deleted one too; an erased one is gone from every list.
        self.client.post(self.url("delete", memory_id=self.dog.id))
        self.client.post(self.url("erase_memory", memory_id=self.dog.id))
        assert self.memory(self.dog).state == Memory.State.REDACTED
        home = self.client.get(self.url("home"))
        assert home.context["deleted"] == []
        assert self.client.post(self.url("erase_memory", memory_id=self.bob.id)).status_code == 404
        assert self.memory(self.bob).text == "Bob likes green tea"

    def test_a_form_without_its_csrf_token_is_refused(self) -> None:
        strict = Client(enforce_csrf_checks=True)
        assert strict.post(self.url("delete", memory_id=self.dog.id)).status_code == 403
        assert self.memory(self.dog).state == Memory.State.ACTIVE
        strict.get(self.url("memory", memory_id=self.dog.id))  # sets the CSRF cookie
        token = strict.cookies["csrftoken"].value
        response = strict.post(
            self.url("delete", memory_id=self.dog.id), {"csrfmiddlewaretoken": token}
        )
        assert response.status_code == 302
        assert self.memory(self.dog).state == Memory.State.DELETED

    # --- right of access, right to erasure -------------------------------------------------

    def test_it_downloads_every_memory_with_its_history_as_json(self) -> None:
        self.client.post(self.url("correct", memory_id=self.oslo.id), {"text": "Alice: Bergen"})
        response = self.client.get(self.url("download"))
        assert response["Content-Disposition"].startswith("attachment;")
        body = json.loads(response.content)
        assert (body["user_id"], body["count"]) == ("alice", 3)
        by_text = {m["text"]: m for m in body["memories"]}
        assert set(by_text) == {"Alice likes green tea", "Alice: Bergen", "Alice has a dog"}
        assert by_text["Alice has a dog"]["agent_id"] == "x"
        bergen = by_text["Alice: Bergen"]
        assert [h["event"] for h in bergen["history"]] == ["ADD", "UPDATE"]
        assert bergen["history"][1]["by"] == "you"
        assert {"created_at", "updated_at", "categories", "metadata", "run_id"} <= set(bergen)
        # Stored verbatim: the message it was, kept by its ADD row.
        assert bergen["source_messages"] == [
            {"role": "user", "content": "Alice lives in Oslo", "used": True}
        ]
        assert body["relations"] == []

    def test_the_download_holds_where_each_memory_came_from_and_the_graph(self) -> None:
        with project_context(self.project.pk):
            payload = {
                "messages": [
                    {"role": "user", "content": "Hi!"},
                    {"role": "user", "content": "I moved to Lisbon."},
                ],
                "scope": {"user_id": "alice", "agent_id": None, "app_id": None, "run_id": None},
            }
            event = MemoryEvent.objects.create(
                project=self.project, payload=payload, user_id="alice"
            )
            moved = make_memory(self.project, "Alice lives in Lisbon", user_id="alice")
            Memory.objects.filter(pk=moved.pk).update(
                source_event_id=event.id, source_positions=[1]
            )
        alice = graph.Scope(user_id="alice")
        graph.upsert_relation(
            self.project.pk, "alice", "lives_in", "lisbon", alice, memory_id=moved.id
        )
        graph.upsert_relation(self.project.pk, "bob", "likes", "tea", graph.Scope(user_id="bob"))
        body = json.loads(self.client.get(self.url("download")).content)
        [lisbon] = [m for m in body["memories"] if m["text"] == "Alice lives in Lisbon"]
        assert [(m["content"], m["used"]) for m in lisbon["source_messages"]] == [
            ("Hi!", False),
            ("I moved to Lisbon.", True),
        ]
        [relation] = body["relations"]
        assert (relation["source"], relation["relationship"], relation["destination"]) == (
            "alice",
            "lives_in",
            "lisbon",
        )
        assert relation["valid"] is True and relation["memory_ids"] == [str(moved.id)]

    def test_erasure_is_confirmed_then_hides_everything_and_queues_the_erasure(self) -> None:
        confirm = self.client.get(self.url("erase"))
        assert confirm.status_code == 200 and confirm.context["count"] == 3
        with self.captureOnCommitCallbacks(execute=False) as queued:
            response = self.client.post(self.url("erase"))
        assert response["Location"] == self.url("erased")
        assert len(queued) == 1  # the worker's erasure job
        assert self.active_texts() == {"Bob likes green tea"}
        with project_context(self.project.pk):
            request = ErasureRequest.objects.get(project=self.project)
        assert (request.subject_id, request.actor) == ("alice", "enduser:alice")
        assert b"under way" in self.client.get(response["Location"]).content
        assert self.active_texts(self.charlie) == {"Alice of globex"}

    # --- refused links and other people's memories -----------------------------------------

    def test_a_tampered_link_is_refused_with_a_plain_page(self) -> None:
        flipped = self.token[:-3] + ("A" if self.token[-3] != "A" else "B") + self.token[-2:]
        for token in (flipped, self.token[:20], "abc", "x" * 5000, "é:1:2", "null"):
            page = self.client.get(self.url("home", token=token))
            assert page.status_code == 403, token
            assert page["Content-Type"].startswith("text/html")
            assert b"This link cannot be used" in page.content

    def test_an_expired_link_is_refused(self) -> None:
        with mock.patch("time.time", return_value=NOW):
            token, _ = links.mint(self.alice.key, "alice", 60)
            assert self.client.get(self.url("home", token=token)).status_code == 200
        with mock.patch("time.time", return_value=NOW + 61):
            page = self.client.get(self.url("home", token=token))
        assert page.status_code == 403
        assert b"expired" in page.content

    def test_another_users_or_projects_memory_is_not_found(self) -> None:
        for memory in (self.bob, self.other):
            for name in ("memory", "correct", "delete"):
                method = self.client.get if name == "memory" else self.client.post
                page = method(self.url(name, memory_id=memory.id), {"text": "mine now"})
                assert page.status_code == 404, (memory.text, name)
                assert page["Content-Type"].startswith("text/html")
        assert self.memory(self.bob).text == "Bob likes green tea"
        assert self.memory(self.other).state == Memory.State.ACTIVE

    def test_hostile_input_never_fails_the_server(self) -> None:
        home = self.url("home")
        assert self.client.get(home, {"q": "tea " * 50_000}).status_code == 400
        assert self.client.get(home, {"q": "tea\x00"}).status_code == 400  # refused at the door
        assert self.client.get(home, {"page": "abc"}).status_code == 200
        assert self.client.get(home, {"q": "')--", "page": "99999"}).status_code == 200
        assert self.client.get(self.url("memory", memory_id="not-a-uuid")).status_code == 404
        assert self.client.get(self.url("memory", memory_id=uuid.uuid4())).status_code == 404
        assert self.client.get(home + "no/such/page/").status_code == 404
        assert self.client.put(home).status_code == 405

    def test_the_pages_are_not_cached_and_keep_the_token_out_of_logs(self) -> None:
        for url in (self.url("home"), self.url("home", token="bad"), self.url("erase")):
            response = self.client.get(url)
            assert response["Cache-Control"] == "no-store"
            assert response["Referrer-Policy"] == "same-origin"
            logged = response.wsgi_request.META["PATH_INFO"]
            assert logged.startswith("/me/<redacted>/") and self.token not in logged
