"""The operator dashboard: login and the project switcher (memory/web/views.py), and a
project's scopes, memories and one memory's page (memory/web/memories.py), through the Django
test client against the real database and embedder."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar
from unittest import mock

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import TestCase, override_settings

from memory import graph
from memory.models import Memory, MemoryEvent, MemoryHistory
from memory.search import DEFAULT_THRESHOLD
from memory.text import embeddings
from memory.text.embeddings import EmbeddingError
from tenants.db import project_context
from tenants.models import Membership, Organization, Project
from tests.factory import add_texts, auth, make_key, make_memory


class DownEmbedder:
    """A hosted embedder whose service is down."""

    def embed(self, texts: Any, max_tokens: int | None = None) -> Any:
        raise EmbeddingError("the embedding service failed (503)")


def person(name: str, org: Organization | None = None, role: str = "owner", **extra: Any) -> User:
    user = get_user_model().objects.create_user(name, password="pw", **extra)
    if org is not None:
        Membership.objects.create(user=user, organization=org, role=role)
    return user


class TeamTestCase(TestCase):
    """A project (acme/main) with an owner (owen) and a reader (rita)."""

    project: ClassVar[Project]
    owner: ClassVar[User]
    reader: ClassVar[User]

    @classmethod
    def setUpTestData(cls) -> None:
        cls.project = make_key("acme", "main").key.project
        cls.owner = person("owen", cls.project.organization, "owner")
        cls.reader = person("rita", cls.project.organization, "reader")


class WebViewsTestCase(TestCase):
    """Olive is a member of acme (projects main and staging); globex is not hers."""

    acme: ClassVar[Project]
    staging: ClassVar[Project]
    globex: ClassVar[Project]
    olive: ClassVar[User]

    @classmethod
    def setUpTestData(cls) -> None:
        cls.acme = make_key("acme", "main").key.project
        cls.staging = make_key("acme", "staging").key.project
        cls.globex = make_key("globex", "main").key.project
        cls.olive = person("olive", cls.acme.organization, "reader")

    def test_it_renders_the_login_page(self) -> None:
        response = self.client.get("/dashboard/login/")
        assert response.status_code == 200
        assert b'<label for="id_username">' in response.content

    def test_it_logs_in_and_lists_the_members_projects(self) -> None:
        response = self.client.post("/dashboard/login/", {"username": "olive", "password": "pw"})
        self.assertRedirects(response, "/dashboard/", fetch_redirect_response=False)
        page = self.client.get("/dashboard/")
        assert [p.name for p in page.context["projects"]] == ["main", "staging"]
        assert b"globex" not in page.content

    def test_it_refuses_a_wrong_password(self) -> None:
        response = self.client.post("/dashboard/login/", {"username": "olive", "password": "no"})
        assert response.status_code == 200
        assert b'role="alert"' in response.content

    def test_it_sends_a_visitor_to_the_login_page(self) -> None:
        response = self.client.get(f"/dashboard/p/{self.acme.pk}/")
        self.assertRedirects(
            response, f"/dashboard/login/?next=/dashboard/p/{self.acme.pk}/",
            fetch_redirect_response=False,
        )  # fmt: skip

    def test_it_switches_to_a_project_of_the_member(self) -> None:
        self.client.force_login(self.olive)
        response = self.client.get("/dashboard/switch/", {"project": str(self.staging.pk)})
        self.assertRedirects(
            response, f"/dashboard/p/{self.staging.pk}/", fetch_redirect_response=False
        )

    def test_it_answers_404_for_a_foreign_or_malformed_project(self) -> None:
        self.client.force_login(self.olive)
        for value in (str(self.globex.pk), "not-a-uuid", ""):
            response = self.client.get("/dashboard/switch/", {"project": value})
            assert response.status_code == 404, value
        assert self.client.get(f"/dashboard/p/{self.globex.pk}/").status_code == 404

    def test_a_superuser_sees_every_project(self) -> None:
        self.client.force_login(person("sue", is_superuser=True))
        page = self.client.get("/dashboard/")
        assert {p.pk for p in page.context["projects"]} == {
            self.acme.pk, self.staging.pk, self.globex.pk
        }  # fmt: skip
        assert self.client.get(f"/dashboard/p/{self.globex.pk}/").status_code == 200


class WebMemoriesTestCase(TestCase):
    """In acme/main: Olive owns, Adam administers, Rita reads. Oscar owns globex/main, whose
    memories acme's people must never see (nor he theirs)."""

    project: ClassVar[Project]
    other: ClassVar[Project]
    olive: ClassVar[User]
    adam: ClassVar[User]
    rita: ClassVar[User]
    oscar: ClassVar[User]

    @classmethod
    def setUpTestData(cls) -> None:
        cls.project = make_key("acme", "main").key.project
        cls.other = make_key("globex", "main").key.project
        org = cls.project.organization
        cls.olive = person("olive", org, Membership.Role.OWNER)
        cls.adam = person("adam", org, Membership.Role.ADMIN)
        cls.rita = person("rita", org, Membership.Role.READER)
        cls.oscar = person("oscar", cls.other.organization, Membership.Role.OWNER)

    def setUp(self) -> None:
        with project_context(self.project.pk):
            self.tea, self.paris = add_texts(
                self.project, ["User likes green tea", "User lives in Paris"], user_id="alice"
            )
            (self.chess,) = add_texts(self.project, ["Plays chess on Sundays"], user_id="bob",
                                      agent_id="coach")  # fmt: skip
        with project_context(self.other.pk):
            (self.secret,) = add_texts(self.other, ["Globex secret plan"], user_id="alice")
        self.client.force_login(self.olive)

    # -- helpers ---------------------------------------------------------------------------

    def url(
        self, name: str = "", memory: Memory | None = None, project: Project | None = None
    ) -> str:
        base = f"/dashboard/p/{(project or self.project).pk}/"
        if memory is not None:
            return f"{base}memories/{memory.pk}/{name}"
        return base + name

    def reload(self, memory: Memory) -> Memory:
        with project_context(memory.project_id):
            return Memory.objects.get(pk=memory.pk)

    def history(self, memory: Memory) -> list[tuple[str, str]]:
        with project_context(memory.project_id):
            rows = MemoryHistory.objects.filter(memory_id=memory.pk).order_by("created_at", "id")
            return [(r.event, r.actor) for r in rows]

    def texts(self, response: Any) -> list[str]:
        assert response.status_code == 200, response.content[:300]
        if response.context["hits"] is not None:
            return [hit.memory.text for hit in response.context["hits"]]
        return [m.text for m in response.context["page"].object_list]

    def listing(self, **params: str) -> list[str]:
        return self.texts(self.client.get(self.url("memories/"), params))

    # -- the scopes page ---------------------------------------------------------------------

    def test_it_lists_scopes_with_active_memory_counts(self) -> None:
        page = self.client.get(self.url())
        kinds = {k["kind"]: k["counts"] for k in page.context["kinds"]}
        assert kinds["user"].top == [("alice", 2), ("bob", 1)]
        assert (kinds["agent"].top, kinds["app"].top) == ([("coach", 1)], [])
        assert b"?user_id=alice" in page.content
        assert b"Globex" not in page.content

    def test_it_counts_only_active_memories_and_finds_ids(self) -> None:
        self.client.post(self.url("delete/", self.paris))
        kinds = {k["kind"]: k["counts"] for k in self.client.get(self.url()).context["kinds"]}
        assert kinds["user"].top == [("alice", 1), ("bob", 1)]
        found = self.client.get(self.url(), {"find": "BO"}).context["kinds"]
        assert found[0]["counts"].top == [("bob", 1)]
        assert found[0]["counts"].matching == 1

    def test_it_caps_each_kind_at_the_top_ids_by_count(self) -> None:
        with project_context(self.project.pk):
            for n in range(30):
                make_memory(self.project, f"fact {n}", user_id=f"u{n:02}")
        kinds = self.client.get(self.url()).context["kinds"]
        assert (len(kinds[0]["counts"].top), kinds[0]["counts"].matching) == (25, 32)
        assert kinds[0]["counts"].top[0] == ("alice", 2)

    # -- the memory list -------------------------------------------------------------------

    def test_it_lists_a_scopes_memories_newest_first(self) -> None:
        with project_context(self.project.pk):
            make_memory(self.project, "Newest", created_at=datetime(2030, 1, 1, tzinfo=UTC))
            make_memory(self.project, "Oldest", created_at=datetime(2000, 1, 1, tzinfo=UTC))
        found = self.listing(user_id="alice")
        assert (found[0], found[-1], len(found)) == ("Newest", "Oldest", 4)
        assert self.listing(agent_id="coach") == ["Plays chess on Sundays"]
        assert len(self.listing()) == 5  # no scope: the whole project, never globex's

    def test_it_finds_a_memory_by_meaning(self) -> None:
        response = self.client.get(self.url("memories/"), {"q": "What does she drink?"})
        assert self.texts(response)[0] == "User likes green tea"
        assert b"sem " in response.content  # the score breakdown is shown
        assert self.listing(q="hot beverage", user_id="bob") == []  # threshold and scope hold

    def test_it_filters_by_state_category_and_date(self) -> None:
        self.client.post(self.url("delete/", self.paris))
        with project_context(self.project.pk):
            make_memory(self.project, "Old fact", categories=["travel"],
                        created_at=datetime(2020, 5, 1, 12, tzinfo=UTC))  # fmt: skip
        assert self.listing(state="deleted") == ["User lives in Paris"]
        assert "User lives in Paris" not in self.listing()
        assert len(self.listing(state="all")) == 4
        assert self.listing(category="Travel") == ["Old fact"]
        assert self.listing(date_from="2020-05-01", date_to="2020-05-01") == ["Old fact"]
        assert "Old fact" not in self.listing(date_from="2021-01-01")

    def test_a_redacted_memory_is_never_listed_nor_changed(self) -> None:
        with project_context(self.project.pk):
            gone = make_memory(self.project, "[redacted]", state=Memory.State.REDACTED)
        assert "[redacted]" not in self.listing(state="all")
        page = self.client.get(self.url("", gone))
        assert b"Delete this memory" not in page.content and b"Restore" not in page.content
        self.client.post(self.url("delete/", gone))
        self.client.post(self.url("restore/", gone))
        assert self.reload(gone).state == Memory.State.REDACTED
        assert self.history(gone) == []

    def test_it_paginates_25_a_page(self) -> None:
        with project_context(self.project.pk):
            for n in range(30):
                make_memory(self.project, f"fact {n}", user_id="many")
        first = self.client.get(self.url("memories/"), {"user_id": "many"})
        assert len(self.texts(first)) == 25
        assert b"?user_id=many&amp;page=2" in first.content
        assert len(self.listing(user_id="many", page="2")) == 5
        assert len(self.listing(user_id="many", page="abc")) == 25  # a bad page: the first
        assert len(self.listing(user_id="many", page="999999999999")) == 5  # past the end: last

    def test_it_pins_the_list_queries(self) -> None:
        url = self.url("memories/")
        self.client.get(url)  # warm the session
        # 1 session, 2 user, 3 project, 4 role, 5 savepoint (a transaction outside tests),
        # 6 set tenant, 7 count, 8 the profile settings (a user's page; profiles off: no
        # profile read), 9 switcher's projects, 10 page, 11 restore the outer tenant,
        # 12 release savepoint
        with self.assertNumQueries(12):
            self.client.get(url, {"user_id": "alice"})

    def test_it_says_when_nothing_stored_is_about_the_search(self) -> None:
        response = self.client.get(self.url("memories/"), {"q": "What is her blood type?"})
        assert self.texts(response) == []
        assert b"No memory is about this" in response.content
        assert b"cut at <strong>0.5</strong>" in response.content  # the cut is shown
        assert 0 < response.context["best"] < DEFAULT_THRESHOLD
        assert b"?q=What+is+her+blood+type%3F&amp;nearest=1" in response.content
        assert self.texts(self.client.get(self.url("memories/"), {"q": "Where does she live?"}))

    def test_it_shows_the_nearest_memory_below_the_cut_on_request(self) -> None:
        asked = {"q": "What is her blood type?", "nearest": "1"}
        response = self.client.get(self.url("memories/"), asked)
        nearest = response.context["nearest"]
        assert self.texts(response) == [] and nearest is not None
        assert nearest.score.score == response.context["best"] < DEFAULT_THRESHOLD
        assert b"Below the cut of 0.5" in response.content
        assert nearest.memory.text.encode() in response.content

    def test_its_scores_and_cut_are_the_apis(self) -> None:
        key = make_key("acme", "main", name="api")
        for question in ("What does she drink?", "Where does she live?", "What is her job?"):
            page = self.client.get(self.url("memories/"), {"q": question, "user_id": "alice"})
            api = self.client.post(
                "/v3/memories/search/",
                {"query": question, "filters": {"user_id": "alice"}},
                content_type="application/json",
                headers=auth(key.raw),
            )
            dashboard = [(h.memory.text, round(h.score.score, 6)) for h in page.context["hits"]]
            assert dashboard == [(r["memory"], r["score"]) for r in api.json()["results"]]

    def test_it_filters_on_text_contained_not_relevance(self) -> None:
        with project_context(self.project.pk):
            add_texts(self.project, ["Drinks GREENISH smoothies"], user_id="alice")
        response = self.client.get(self.url("memories/"), {"contains": "green"})
        assert self.texts(response) == ["Drinks GREENISH smoothies", "User likes green tea"]
        assert b"not a relevance search" in response.content
        assert self.listing(contains="green", user_id="bob") == []
        assert self.listing(contains="%") == []  # a LIKE wildcard is a character like any
        # With a search too: the search ranks only the memories that contain it.
        assert self.listing(contains="paris", q="Where does she live?") == ["User lives in Paris"]
        assert self.listing(contains="tea", q="Where does she live?") == []

    def test_in_a_users_scope_their_own_name_carries_no_weight(self) -> None:
        with project_context(self.project.pk):
            mine = add_texts(self.project, ["My name is Bob.", "I live in Austin."], user_id="bob")
        graph.link_mentions(self.project.pk, [m.pk for m in mine])
        assert self.listing(q="where does bob live", user_id="bob")[0] == "I live in Austin."

    @override_settings(ENGRAM_EMBEDDING_CHECK_SECONDS=3600)
    def test_it_pins_the_scopes_and_search_queries(self) -> None:
        self.client.get(self.url())  # warm the session
        # ... and the query model, with its read of the deployment's embedding model (once per
        # ENGRAM_EMBEDDING_CHECK_SECONDS per process: not per request).
        self.client.get(self.url("memories/"), {"q": "tea", "user_id": "alice"})
        # 1 session, 2 user, 3 project, 4 role, 5 savepoint, 6 set tenant, 7 the four kinds'
        # counts (one UNION ALL), 8 the top spenders (one GROUP BY, LIMIT 5), 9 switcher's
        # projects, 10 restore tenant, 11 release
        with self.assertNumQueries(11):
            self.client.get(self.url())
        # ... 7 the names the scope's user goes by, 8 the hybrid search (one statement),
        # 9 the profile settings (a user's page), 10 switcher's projects, ...
        with self.assertNumQueries(12):
            self.client.get(self.url("memories/"), {"q": "tea", "user_id": "alice"})

    def test_it_searches_deleted_memories_when_asked(self) -> None:
        self.client.post(self.url("delete/", self.paris))
        assert "User lives in Paris" not in self.listing(q="Where does she live?")
        assert self.listing(q="Where does she live?", state="deleted") == ["User lives in Paris"]

    def test_it_shows_form_errors_for_bad_filters(self) -> None:
        bad = {"date_from": "2024-13-45", "state": "gone", "q": "x" * 5000, "user_id": "u" * 300}
        response = self.client.get(self.url("memories/"), bad)
        assert response.status_code == 200
        assert set(response.context["form"].errors) == set(bad)
        assert b"Some filters are not valid" in response.content
        response = self.client.get(self.url("memories/"), {"date_from": "2024-02-02",
                                                           "date_to": "2024-02-01"})  # fmt: skip
        assert "date_to" in response.context["form"].errors

    def test_hostile_query_strings_never_fail(self) -> None:
        for params in (
            {"q": "'; DROP TABLE memory_memory; --"},
            {"q": "!!! & | :* ()"},
            {"user_id": "x' OR '1'='1"},
            {"date_to": "9999-12-31", "date_from": "0001-01-01"},
            {"page": "-1"},
            {"q": "\U0001f600 " * 100},
        ):
            response = self.client.get(self.url("memories/"), params)
            assert response.status_code == 200, params
        assert self.client.get(self.url("memories/"), {"q": "tea\x00"}).status_code == 400
        assert self.client.get(self.url(), {"find": "a\x00"}).status_code == 400
        assert self.client.get(self.url("memories/not-a-uuid/")).status_code == 404
        assert self.client.get(self.url("memories/") + "00000000-0000-0000-0000-000000000000/")\
            .status_code == 404  # fmt: skip

    # -- one memory ------------------------------------------------------------------------

    def test_it_shows_a_memory_with_its_history(self) -> None:
        page = self.client.get(self.url("", self.tea))
        assert page.context["memory"].text == "User likes green tea"
        assert [h.event for h in page.context["history"]] == ["ADD"]
        assert page.context["event"] is None  # infer=false writes no event row
        assert b"Save changes" in page.content and b"Delete this memory" in page.content

    def test_it_shows_the_source_event(self) -> None:
        with project_context(self.project.pk):
            event = MemoryEvent.objects.create(
                project=self.project, status="FAILED", extractor="claude", attempts=3,
                error="overloaded", usage={"calls": 2, "input_tokens": 1234, "output_tokens": 56},
                payload={"messages": [{"role": "user", "content": "Hi"},
                                      {"role": "user", "content": "I moved to Lyon"}]},
            )  # fmt: skip
            memory = make_memory(self.project, "Lives in Lyon", source_event_id=event.pk,
                                 source_positions=[1])  # fmt: skip
        page = self.client.get(self.url("", memory))
        assert page.context["event"] == event
        assert [(m["content"], m["source"]) for m in page.context["messages_of_event"]] == [
            ("Hi", False), ("I moved to Lyon", True)
        ]  # fmt: skip
        assert f"/events/{event.pk}/".encode() in page.content
        for shown in (b"1234 input and 56 output tokens", b"overloaded", b"3 attempts", b"claude"):
            assert shown in page.content, shown

    def test_an_owner_edits_and_the_memory_is_re_embedded(self) -> None:
        before = self.reload(self.tea)
        response = self.client.post(
            self.url("edit/", self.tea),
            {"text": "User likes oolong tea", "metadata": '{"source": "operator"}'},
            follow=True,
        )
        assert b"Memory updated." in response.content
        after = self.reload(self.tea)
        assert (after.text, after.metadata) == ("User likes oolong tea", {"source": "operator"})
        assert list(after.embedding) != list(before.embedding)
        assert self.history(self.tea)[-1] == ("UPDATE", "user:olive")

    def test_an_admin_edits_too(self) -> None:
        self.client.force_login(self.adam)
        self.client.post(self.url("edit/", self.tea), {"text": "User likes black tea"})
        assert self.reload(self.tea).text == "User likes black tea"
        assert self.history(self.tea)[-1] == ("UPDATE", "user:adam")

    def test_an_immutable_memory_is_not_edited(self) -> None:
        with project_context(self.project.pk):
            Memory.objects.filter(pk=self.tea.pk).update(immutable=True)
        response = self.client.post(self.url("edit/", self.tea), {"text": "Changed"}, follow=True)
        assert b"is immutable" in response.content
        assert self.reload(self.tea).text == "User likes green tea"
        assert len(self.history(self.tea)) == 1

    def test_it_refuses_bad_edits_with_form_errors(self) -> None:
        for body, field in (
            ({"text": "   "}, "text"),
            ({"text": "ok\x00"}, "text"),
            ({"text": "ok", "metadata": "[1, 2]"}, "metadata"),
            ({"text": "ok", "metadata": '{"user_id": "mallory"}'}, "metadata"),
            ({"text": "ok", "metadata": '{"a": "\\u0000"}'}, "metadata"),
            ({"text": "ok", "metadata": "{not json"}, "metadata"),
            ({"text": "ok", "expiration_date": "tomorrow"}, "expiration_date"),
        ):
            response = self.client.post(self.url("edit/", self.tea), body)
            assert response.status_code == 400, body
            assert field in response.context["form"].errors, body
        assert self.reload(self.tea).text == "User likes green tea"
        assert len(self.history(self.tea)) == 1

    def test_an_owner_deletes_and_restores(self) -> None:
        response = self.client.post(self.url("delete/", self.tea), follow=True)
        assert b"Memory deleted." in response.content
        assert b"Restore this memory" in response.content
        assert self.reload(self.tea).state == Memory.State.DELETED
        response = self.client.post(self.url("restore/", self.tea), follow=True)
        assert b"Memory restored." in response.content
        assert self.reload(self.tea).state == Memory.State.ACTIVE
        assert [e for e, _ in self.history(self.tea)] == ["ADD", "DELETE", "RESTORE"]
        assert self.history(self.tea)[1:] == [("DELETE", "user:olive"), ("RESTORE", "user:olive")]

    def test_restoring_an_active_memory_says_why_not(self) -> None:
        response = self.client.post(self.url("restore/", self.tea), follow=True)
        assert b"only a deleted one" in response.content
        assert len(self.history(self.tea)) == 1

    def test_a_failing_embedder_is_reported_not_a_500(self) -> None:
        with mock.patch.object(
            embeddings, "_active", (embeddings.configured_space(), DownEmbedder())
        ):
            response = self.client.get(self.url("memories/"), {"q": "tea"})
            assert "Search is unavailable" in str(response.context["form"].errors["q"])
            response = self.client.post(self.url("edit/", self.tea), {"text": "New"}, follow=True)
        assert b"service failed" in response.content
        assert self.reload(self.tea).text == "User likes green tea"

    def test_the_change_endpoints_take_only_post(self) -> None:
        for name in ("edit/", "delete/", "restore/"):
            assert self.client.get(self.url(name, self.tea)).status_code == 405

    # -- permissions -----------------------------------------------------------------------

    def test_a_reader_sees_the_pages_but_changes_nothing(self) -> None:
        self.client.force_login(self.rita)
        page = self.client.get(self.url("", self.tea))
        assert page.status_code == 200
        assert b"Save changes" not in page.content and b"Delete this memory" not in page.content
        assert len(self.listing(user_id="alice")) == 2
        for name, body in (("edit/", {"text": "Hacked"}), ("delete/", {}), ("restore/", {})):
            assert self.client.post(self.url(name, self.tea), body).status_code == 403
        tea = self.reload(self.tea)
        assert (tea.text, tea.state) == ("User likes green tea", Memory.State.ACTIVE)
        assert len(self.history(self.tea)) == 1

    def test_another_organization_sees_nothing(self) -> None:
        self.client.force_login(self.oscar)
        for url in (self.url(), self.url("memories/"), self.url("", self.tea)):
            assert self.client.get(url).status_code == 404, url
        for name in ("edit/", "delete/", "restore/"):
            assert self.client.post(self.url(name, self.tea), {"text": "x"}).status_code == 404
        # Nor through his own project: acme's memory id is not there.
        assert self.client.get(self.url("", self.tea, project=self.other)).status_code == 404
        assert (
            self.client.post(self.url("delete/", self.tea, project=self.other)).status_code == 404
        )
        assert self.reload(self.tea).state == Memory.State.ACTIVE
        listing = self.client.get(self.url("memories/", project=self.other))
        assert self.texts(listing) == ["Globex secret plan"]

    def test_a_superuser_sees_every_project(self) -> None:
        self.client.force_login(person("sue", is_superuser=True))
        assert self.client.get(self.url("", self.secret, project=self.other)).status_code == 200
        assert sorted(self.listing(user_id="alice")) == [
            "User likes green tea",
            "User lives in Paris",
        ]
