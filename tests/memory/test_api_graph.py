"""The graph API (POST /v1/graph/traverse/, GET /v1/graph/) and search's enable_graph, through
the HTTP API against a real AGE graph built with memory.graph."""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar
from urllib.parse import quote, urlencode

from django.conf import settings as django_settings
from django.db import connection
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from audit.models import AccessLog
from memory import graph
from memory.graph import Scope
from memory.models import Memory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth, make_memory

ALICE = Scope(user_id="alice")
ALICE_BOT = Scope(user_id="alice", agent_id="bot")
BOB = Scope(user_id="bob")

HOSTILE = [
    "$$",
    "a $$ b $$",
    "it's",
    'say "hi"',
    "back\\slash \\' \\\" \\\\",
    "}) DETACH DELETE n //",
    "'); DROP TABLE memory_memory; --",
    "$name $scope {name: 'x'}",
    "%s %(name)s {graph}",
    "emoji 🦜🧠 and zwj 👩‍💻",
    "עברית مرحبا RTL \u202e override",
    "e\u0301 combining a\u0308\u0323",
    "x" * 10_000,
]


def triples(relations: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(r["source"], r["relationship"], r["destination"]) for r in relations}


def graph_state(project: uuid.UUID) -> tuple[Any, ...]:
    """Every vertex and edge of the project's graph, as a count and a digest of properties."""
    digest = "(SELECT count(*), md5(string_agg(ag_catalog.agtype_out(properties)::text, '|' "
    digest += "ORDER BY id)) FROM {graph}.{label})"
    with project_context(project):
        name = graph.ensure_graph(project)
        with connection.cursor() as cursor:
            entities = digest.format(graph=name, label='"Entity"')
            edges = digest.format(graph=name, label='"RELATES"')
            cursor.execute(f"SELECT * FROM {entities} e, {edges} r")  # noqa: S608 - checked name
            row = cursor.fetchone()
    assert row is not None
    return tuple(row)


class GraphApiTestCase(BaseTestCase):
    """Alice's project: alice -knows-> bob -works_at-> acme -located_in-> paris, alice -likes->
    python (user alice); alice -uses-> python (user alice with agent bot); bob -likes-> python
    (user bob); alice -likes-> java, invalidated. Charlie's project: its own user "alice"."""

    memories: ClassVar[dict[str, Memory]]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        a, c = cls.alice.key.project_id, cls.charlie.key.project_id
        with project_context(a):
            cls.memories = {
                "knows": make_memory(a, "Alice knows Bob", metadata={"topic": "people"}),
                "works": make_memory(a, "Bob works at Acme", metadata={"topic": "work"}),
                "located": make_memory(a, "Acme is in Paris", metadata={"topic": "work"}),
                "likes": make_memory(a, "Alice likes Python"),
            }
        event = uuid.uuid4()
        for key, (src, rel, dst) in {
            "knows": ("Alice", "knows", "Bob"),
            "works": ("Bob", "works at", "Acme"),
            "located": ("Acme", "located in", "Paris"),
            "likes": ("Alice", "likes", "Python"),
        }.items():
            graph.upsert_relation(
                a, src, rel, dst, ALICE, memory_id=cls.memories[key].pk, event_id=event
            )
        graph.upsert_relation(a, "Alice", "uses", "Python", ALICE_BOT)
        graph.upsert_relation(a, "Bob", "likes", "Python", BOB)
        graph.upsert_relation(a, "Alice", "likes", "Java", ALICE)
        graph.invalidate_relations(a, ALICE, source="alice", destination="java")
        graph.upsert_relation(c, "Alice", "knows", "Charlie's secret", ALICE)

    def traverse(self, body: dict[str, Any], who: Any = None) -> Any:
        return self.call("post", "/v1/graph/traverse/", body, who=who)

    def listing(self, query: str, who: Any = None) -> Any:
        key = who or self.alice
        return self.client.get(f"/v1/graph/?{query}", headers=auth(key.raw))

    def test_it_traverses_depth_1_2_3(self) -> None:
        alice = {"filters": {"user_id": "alice"}}  # with her agent too
        one = self.traverse({**alice, "entity": "Alice"}).json()
        assert triples(one["relations"]) == {
            ("alice", "knows", "bob"),
            ("alice", "likes", "python"),
            ("alice", "uses", "python"),
        }
        assert one["nodes"][0]["name"] == "alice"
        assert {n["name"] for n in one["nodes"]} == {"alice", "bob", "python"}
        two = self.traverse({**alice, "entity": " ALICE", "depth": 2}).json()
        assert triples(two["relations"]) == triples(one["relations"]) | {
            ("bob", "works_at", "acme")
        }
        three = self.traverse({**alice, "entity": "alice", "depth": 3}).json()
        assert ("acme", "located_in", "paris") in triples(three["relations"])
        assert len(three["relations"]) == 5
        # Either way round, and nothing for an unknown entity.
        back = self.traverse({**alice, "entity": "paris", "depth": 2}).json()
        assert triples(back["relations"]) == {
            ("acme", "located_in", "paris"),
            ("bob", "works_at", "acme"),
        }
        assert self.traverse({**alice, "entity": "nobody"}).json() == {"nodes": [], "relations": []}

    def test_it_answers_each_relation_with_its_validity_memories_and_scope(self) -> None:
        body = self.traverse({"user_id": "alice", "entity": "bob"}).json()
        knows = next(r for r in body["relations"] if r["relationship"] == "knows")
        assert knows["valid"] is True and knows["invalidated_at"] is None
        assert knows["memory_ids"] == [str(self.memories["knows"].pk)]
        assert uuid.UUID(knows["event_id"])
        assert (knows["user_id"], knows["agent_id"], knows["app_id"], knows["run_id"]) == (
            "alice",
            None,
            None,
            None,
        )
        nodes = {n["id"]: n for n in body["nodes"]}
        assert nodes[knows["source_id"]]["display_name"] == "Alice"
        assert nodes[knows["destination_id"]]["name"] == "bob"
        assert nodes[knows["destination_id"]]["type"] == ""

    def test_it_stops_at_the_limit(self) -> None:
        body = {"filters": {"user_id": "alice"}, "entity": "alice", "depth": 3}
        assert len(self.traverse({**body, "limit": 1}).json()["relations"]) == 1
        assert len(self.traverse({**body, "limit": 3}).json()["relations"]) == 3
        assert len(self.traverse({**body, "limit": 500}).json()["relations"]) == 5

    def test_invalid_relations_only_when_asked(self) -> None:
        body = {"filters": {"user_id": "alice"}, "entity": "alice"}
        assert ("alice", "likes", "java") not in triples(self.traverse(body).json()["relations"])
        history = self.traverse({**body, "include_invalid": True}).json()["relations"]
        java = next(r for r in history if r["destination"] == "java")
        assert java["valid"] is False and java["invalidated_at"]
        listed = self.listing("user_id=alice").json()
        every = self.listing("user_id=alice&include_invalid=true").json()
        assert every["count"] == listed["count"] + 1 == 6

    def test_scope_ids_are_read_as_search_reads_them(self) -> None:
        def seen(filters: dict[str, Any]) -> set[tuple[str, str, str]]:
            response = self.traverse({"entity": "python", "filters": filters})
            assert response.status_code == 200, response.content
            return triples(response.json()["relations"])

        # Named ids must match, ids left out are not tested, "*" takes any value and NOT "*"
        # none.
        likes, uses = ("alice", "likes", "python"), ("alice", "uses", "python")
        assert seen({"user_id": "alice"}) == {likes, uses}
        assert seen({"user_id": "alice", "NOT": {"agent_id": "*"}}) == {likes}
        everything_unset = {"OR": [{"agent_id": "*"}, {"app_id": "*"}, {"run_id": "*"}]}
        assert seen({"AND": [{"user_id": "alice"}, {"NOT": everything_unset}]}) == {likes}
        assert seen({"user_id": "alice", "agent_id": "*"}) == {uses}
        assert seen({"AND": [{"user_id": "alice"}, {"agent_id": "bot"}]}) == {uses}
        assert seen({"user_id": "bob"}) == {("bob", "likes", "python")}
        assert seen({"agent_id": "bot"}) == {uses}
        assert seen({"user_id": "carol"}) == set()
        # The list reads the same way.
        listed = self.listing("user_id=alice&agent_id=*").json()["results"]
        assert triples(listed) == {("alice", "uses", "python")}
        assert all(r["agent_id"] == "bot" for r in listed)

    def test_another_project_never_sees_alices_graph(self) -> None:
        for body in ({"user_id": "alice", "entity": "alice", "depth": 3},):
            theirs = self.traverse(body, who=self.charlie).json()
            assert triples(theirs["relations"]) == {("alice", "knows", "charlie's secret")}
            mine = self.traverse(body).json()
            assert "charlie's secret" not in {n["name"] for n in mine["nodes"]}
        listed = self.listing("user_id=alice&include_invalid=true", who=self.charlie).json()
        assert listed["count"] == 1
        assert triples(listed["results"]) == {("alice", "knows", "charlie's secret")}
        assert self.listing("user_id=bob", who=self.charlie).json()["count"] == 0

    def test_it_lists_a_scope_page_by_page_oldest_first(self) -> None:
        first = self.listing("user_id=alice&page_size=3").json()
        assert first["count"] == 5 and first["previous"] is None and len(first["results"]) == 3
        second = self.client.get(first["next"], headers=auth(self.alice.raw)).json()
        assert second["next"] is None and len(second["results"]) == 2
        ordered = first["results"] + second["results"]
        assert [r["relationship"] for r in ordered] == [
            "knows",
            "works_at",
            "located_in",
            "likes",
            "uses",  # with her agent
        ]
        assert [int(r["id"]) for r in ordered] == sorted(int(r["id"]) for r in ordered)
        whole = self.listing("user_id=alice").json()
        assert whole["results"] == ordered
        assert self.listing("user_id=alice&page=3&page_size=3").status_code == 404
        # The Python dict repr the mem0ai client sends as `filters` works too.
        repr_filters = quote(str({"user_id": "alice"}))
        assert self.listing(f"filters={repr_filters}").json()["count"] == 5

    def test_other_filters_keep_the_relations_of_matching_memories(self) -> None:
        work = {"user_id": "alice", "metadata": {"topic": "work"}}
        found = self.traverse({"entity": "bob", "depth": 3, "filters": work}).json()
        assert triples(found["relations"]) == {
            ("bob", "works_at", "acme"),
            ("acme", "located_in", "paris"),
        }
        listed = self.listing("filters=" + quote(json.dumps(work))).json()
        assert listed["count"] == 2
        assert {r["relationship"] for r in listed["results"]} == {"works_at", "located_in"}
        # Deleted memories back nothing.
        with project_context(self.alice.key.project_id):
            Memory.objects.filter(pk=self.memories["works"].pk).update(state="deleted")
        assert self.listing("filters=" + quote(json.dumps(work))).json()["count"] == 1
        ids = {"user_id": "alice", "memory_ids": [str(self.memories["likes"].pk)]}
        only = self.traverse({"entity": "alice", "filters": ids}).json()
        assert triples(only["relations"]) == {("alice", "likes", "python")}

    def test_an_impossible_filter_matches_nothing_as_search_reads_it(self) -> None:
        """Empty lists (issue #24): no relation, not a 500; NOT of one keeps them all."""
        impossibles: list[dict[str, Any]] = [
            {"memory_ids": []},
            {"OR": []},
            {"categories": {"in": []}},
        ]
        for impossible in impossibles:
            filters = {"user_id": "alice", **impossible}
            response = self.traverse({"entity": "alice", "depth": 3, "filters": filters})
            assert response.status_code == 200, (filters, response.content)
            assert response.json()["relations"] == [], filters
            listed = self.listing("filters=" + quote(json.dumps(filters)))
            assert listed.status_code == 200, (filters, listed.content)
            assert listed.json()["count"] == 0, filters
            body = {"query": "alice", "filters": filters, "enable_graph": True}
            searched = self.call("post", "/v3/memories/search/", body)
            assert searched.status_code == 200, (filters, searched.content)
            # Nothing considered at all: nothing relevant, and no best score to tell.
            expected = {
                "results": [],
                "relations": [],
                "nothing_relevant": True,
                "best_score": None,
            }
            assert searched.json() == expected, filters
            negated = {"user_id": "alice", "NOT": impossible}
            every = self.listing("filters=" + quote(json.dumps(negated))).json()
            assert every["count"] == 4, negated

    def test_it_refuses_bad_input_and_changes_nothing(self) -> None:
        project = self.alice.key.project_id
        before = graph_state(project)
        ok = {"entity": "alice", "filters": {"user_id": "alice"}}
        bodies: list[Any] = [
            {**ok, "depth": 0},
            {**ok, "depth": 4},
            {**ok, "depth": "2"},
            {**ok, "depth": True},
            {**ok, "depth": 2.0},
            {**ok, "depth": None},
            {**ok, "limit": 0},
            {**ok, "limit": 501},
            {**ok, "limit": "5"},
            {"filters": {"user_id": "alice"}},
            {**ok, "entity": ""},
            {**ok, "entity": "   "},
            {**ok, "entity": ["alice"]},
            {**ok, "entity": {"$ne": None}},
            {**ok, "filters": "user_id=alice"},
            {**ok, "filters": ["user_id", "alice"]},
            {"entity": "alice"},
            {**ok, "filters": {}},
            {**ok, "filters": {"user_id": "*"}},
            {**ok, "filters": {"OR": [{"user_id": "alice"}, {"user_id": "bob"}]}},
            {**ok, "filters": {"user_id": {"in": ["alice"]}}},
            {**ok, "filters": {"AND": [{"user_id": "alice"}, {"user_id": "bob"}]}},
            {**ok, "filters": {"colour": "red"}},
            {**ok, "include_invalid": "maybe"},
            {**ok, "user_id": ""},
            ["alice"],
        ]
        for body in bodies:
            response = self.traverse(body)
            assert response.status_code == 400, (body, response.content)
            assert response.json()["detail"], body
        queries = [
            "",
            "agent_id=*",
            "user_id=alice&page_size=501",
            "user_id=alice&page=0",
            "user_id=alice&page=%C2%B2",
            "user_id=alice&include_invalid=maybe",
            "filters=[1]",
            "filters=" + quote('{"OR": [{"user_id": "alice"}]}'),
            "user_id=" + "x" * 300,
        ]
        for query in queries:
            response = self.listing(query)
            assert response.status_code == 400, (query, response.content)
            assert response.json()["detail"], query
        assert graph_state(project) == before

    @override_settings(ENGRAM_MAX_TEXT_CHARS=100)
    def test_an_entity_over_the_text_limit_is_a_400(self) -> None:
        response = self.traverse({"entity": "x" * 101, "user_id": "alice"})
        assert response.status_code == 400
        assert "100" in response.json()["detail"]
        assert self.traverse({"entity": "x" * 100, "user_id": "alice"}).status_code == 200

    def test_hostile_names_are_stored_and_read_back_exactly(self) -> None:
        project = self.alice.key.project_id
        assert django_settings.ENGRAM_MAX_TEXT_CHARS >= 10_000
        before = self.listing("user_id=alice&include_invalid=true").json()["results"]
        for name in HOSTILE:
            graph.upsert_relation(project, "Probe", "names", name, ALICE)
            response = self.traverse({"entity": name, "user_id": "alice"})
            assert response.status_code == 200, (name[:40], response.content[:200])
            body = response.json()
            assert triples(body["relations"]) == {("probe", "names", graph.normalise_name(name))}
            assert body["nodes"][0]["display_name"] == name
            # Querying with it, when it is not an entity, finds nothing and breaks nothing.
            missing = self.traverse({"entity": name + " (absent)", "user_id": "alice"})
            assert missing.json() == {"nodes": [], "relations": []}
        after = self.listing("user_id=alice&include_invalid=true&page_size=500").json()
        assert after["results"][: len(before)] == before
        assert {r["destination"] for r in after["results"][len(before) :]} == {
            graph.normalise_name(n) for n in HOSTILE
        }
        # A scope id that is hostile text is a plain value too.
        for name in ("}) DETACH DELETE n //", "$$", "%s"):
            response = self.listing(urlencode({"user_id": name}))
            assert response.json()["count"] == 0

    def test_every_request_leaves_one_access_log_row(self) -> None:
        with project_context(self.alice.key.project_id):
            before = AccessLog.objects.count()
        self.traverse({"entity": "alice", "user_id": "alice"})
        self.listing("user_id=alice")
        with project_context(self.alice.key.project_id):
            rows = list(AccessLog.objects.order_by("-id")[:2])
            assert AccessLog.objects.count() == before + 2
        assert [row.scope for row in rows] == [{"user_id": ["alice"]}] * 2


class SearchWithGraphTestCase(BaseTestCase):
    """Search's enable_graph: the relations of the results, then those the query names."""

    memories: ClassVar[list[Memory]]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        project = cls.alice.key.project
        with project_context(project.pk):
            cls.memories = add_texts(
                project,
                ["I work at Acme in Paris", "I like Python", "My brother plays chess"],
                user_id="alice",
            )
        work, python, chess = cls.memories
        a = project.pk
        graph.upsert_relation(a, "alice", "works at", "Acme", ALICE, memory_id=work.pk)
        graph.upsert_relation(a, "Acme", "located in", "Paris", ALICE, memory_id=work.pk)
        graph.upsert_relation(a, "alice", "likes", "Python", ALICE, memory_id=python.pk)
        graph.upsert_relation(a, "brother", "plays", "chess", ALICE, memory_id=chess.pk)
        graph.upsert_relation(a, "alice", "likes", "Rust", BOB)  # another user's

    def search(self, path: str, body: dict[str, Any]) -> Any:
        response = self.call("post", path, body)
        assert response.status_code == 200, response.content
        return response.json()

    def test_without_the_flag_the_shape_is_unchanged(self) -> None:
        body = {"query": "where does alice work?", "filters": {"user_id": "alice"}}
        # Mem0's shape, and the verdict beside it that Mem0's clients ignore: no relations.
        for answer in (
            self.search("/v3/memories/search/", body),
            self.search("/v3/memories/search/", {**body, "enable_graph": False}),
        ):
            assert list(answer) == ["results", "nothing_relevant"]
            assert answer["nothing_relevant"] is False
        assert isinstance(self.search("/v2/memories/search/", body), list)
        assert isinstance(self.search("/v1/memories/search/", body), list)

    def test_relations_of_the_results_come_first_then_those_the_query_names(self) -> None:
        body = {
            "query": "which company in Paris does alice work for, and what about chess?",
            "filters": {"user_id": "alice"},
            "top_k": 1,
            "enable_graph": True,
        }
        for path in ("/v3/memories/search/", "/v2/memories/search/", "/v1/memories/search/"):
            answer = self.search(path, body)
            assert list(answer) == ["results", "relations", "nothing_relevant"], path
            assert [r["memory"] for r in answer["results"]] == ["I work at Acme in Paris"]
            relations = [
                (r["source"], r["relationship"], r["destination"]) for r in answer["relations"]
            ]
            # "alice" is the scope's own user: a stop word in her scope, not a name the query
            # means (her "likes python" is not about work); "chess" is.
            assert relations == [
                ("alice", "works_at", "acme"),
                ("acme", "located_in", "paris"),
                ("brother", "plays", "chess"),  # touches "chess", named in the query
            ], path
            assert all(r["target"] == r["destination"] for r in answer["relations"])

    def test_the_context_block_holds_the_relations_the_query_names(self) -> None:
        body = {"query": "what about chess?", "user_id": "alice", "format": "json"}
        answer = self.call("post", "/v1/context/", body)
        assert answer.status_code == 200, answer.content
        relations = [p["text"] for p in answer.json()["parts"] if p["kind"] == "relation"]
        assert "Relation: brother \u2014 plays \u2192 chess" in relations
        # A query that names nothing reads no graph (no relation parts, one statement fewer).
        plain = self.call("post", "/v1/context/", {**body, "query": "what does she do?"})
        assert all(p["kind"] != "relation" for p in plain.json()["parts"])

    def test_relations_follow_the_rank_of_their_memories(self) -> None:
        body = {"query": "chess", "filters": {"user_id": "alice"}, "enable_graph": True}
        answer = self.search("/v3/memories/search/", {**body, "threshold": 0})
        ranked = [r["memory"] for r in answer["results"]]
        assert ranked[0] == "My brother plays chess"
        assert answer["relations"][0]["relationship"] == "plays"
        # Another user's relations never appear, even for an entity the query names.
        rust = self.search("/v3/memories/search/", {**body, "query": "does alice like rust?"})
        assert ("alice", "likes", "rust") not in {
            (r["source"], r["relationship"], r["destination"]) for r in rust["relations"]
        }

    def test_a_filter_the_graph_cannot_read_keeps_only_the_results_relations(self) -> None:
        body = {
            "query": "python",
            "filters": {"OR": [{"user_id": "alice"}, {"user_id": "bob"}]},
            "enable_graph": True,
            "threshold": 0,
            "top_k": 1,
        }
        answer = self.search("/v3/memories/search/", body)
        assert [r["memory"] for r in answer["results"]] == ["I like Python"]
        assert [r["relationship"] for r in answer["relations"]] == ["likes"]

    def test_the_flag_must_be_a_boolean(self) -> None:
        response = self.call(
            "post", "/v3/memories/search/", {"query": "x", "user_id": "alice", "enable_graph": "x"}
        )
        assert response.status_code == 400
        assert response.json()["detail"]


FIELDS = [
    "entity", "filters", "depth", "limit", "include_invalid", "user_id", "agent_id", "run_id",
    "app_id", "AND", "OR", "NOT", "metadata", "categories", "memory_ids", "*",
]  # fmt: skip
hostile_text = st.one_of(
    st.sampled_from([
        "", " ", "\x00", "\ud800", "²", "*", "alice", "bob", "python", "-1", "0", "501",
        "$$ }) DETACH DELETE n //", "'; DROP TABLE x;--", "%s", "{graph}", "x" * 30_000,
    ]),
    st.text(max_size=30),
)  # fmt: skip
leaves = st.one_of(
    hostile_text,
    st.integers(min_value=-(10**20), max_value=10**20),
    st.sampled_from([0, 1, 2, 3, 4, 500, 501]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
json_values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(FIELDS), hostile_text), inner, max_size=3),
    ),
    max_leaves=8,
)
QUERY_NAMES = ["user_id", "agent_id", "filters", "page", "page_size", "include_invalid", "x"]


class GraphHostileRequestsTestCase(HypothesisTestCase, BaseTestCase):
    """Generated requests at both graph endpoints: below 500, JSON `detail` on errors, one
    access-log row each, and the graph never changed (reads only)."""

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        a = cls.alice.key.project_id
        graph.upsert_relation(a, "alice", "likes", "python", ALICE)
        graph.upsert_relation(a, "alice", "uses", "python", ALICE_BOT)

    def check(self, method: str, path: str, body: str | None = None) -> None:
        project = self.alice.key.project_id
        before = graph_state(project)
        logged = self.access_rows()
        kwargs: dict[str, Any] = {"headers": auth(self.alice.raw)}
        if body is not None:
            kwargs.update(
                data=body.encode("utf-8", "surrogatepass"), content_type="application/json"
            )
        response = getattr(self.client, method)(path, **kwargs)
        where = f"{method.upper()} {path[:200]} {(body or '')[:200]!r}"
        assert response.status_code < 500, (where, response.content[:300])
        payload = response.json()
        if response.status_code >= 400:
            assert isinstance(payload, dict) and payload.get("detail"), (where, payload)
        else:
            assert set(payload) >= ({"nodes", "relations"} if method == "post" else {"count"})
        assert graph_state(project) == before, where
        assert self.access_rows() == logged + 1, where

    def access_rows(self) -> int:
        """Alice's rows, and those of requests refused before their key was read (NUL in the
        URL): they have no project and are read outside any tenant."""
        with project_context(self.alice.key.project_id):
            mine = AccessLog.objects.count()
        with project_context(None):
            return mine + AccessLog.objects.count()

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        body=st.one_of(
            st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=5),
            # Mostly well-formed: a real scope, hostile names and bounds.
            st.fixed_dictionaries(
                {
                    "entity": hostile_text,
                    "filters": st.one_of(
                        json_values,
                        st.fixed_dictionaries(
                            {"user_id": st.sampled_from(["alice", "*", "bob"])},
                            optional={"agent_id": hostile_text, "metadata": json_values},
                        ),
                    ),
                },
                optional={
                    "depth": leaves,
                    "limit": leaves,
                    "user_id": leaves,
                    "include_invalid": leaves,
                },
            ),
            json_values,
        )
    )
    def test_hostile_traversals(self, body: Any) -> None:
        self.check("post", "/v1/graph/traverse/", json.dumps(body, ensure_ascii=True))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        pairs=st.lists(
            st.tuples(
                st.sampled_from(QUERY_NAMES),
                st.one_of(hostile_text, json_values.map(json.dumps)),
            ),
            max_size=3,
        )
    )
    def test_hostile_listings(self, pairs: list[tuple[str, str]]) -> None:
        query = "&".join(
            f"{quote(n)}={quote(v, safe='', errors='surrogatepass')}" for n, v in pairs
        )
        self.check("get", f"/v1/graph/?{query}")
