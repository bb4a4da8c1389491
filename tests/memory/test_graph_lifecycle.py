"""The graph follows the memories behind it (issue #9), against real Apache AGE.

Deleting, superseding or rewording a memory (through the memory actions, whoever calls them)
invalidates the edges only it backed; restoring it brings back what its deletion invalidated;
GDPR erasure removes the user's vertices and edges entirely and leaves no edge pointing to a
missing vertex. Memories are made with the actions; edges with memory.graph.upsert_relation.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any
from unittest import mock

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from memory import graph
from memory.actions import (
    Actor,
    BatchUpdate,
    ImmutableMemoryError,
    NewMemory,
    do_batch_delete,
    do_batch_update,
    do_create_memory,
    do_delete_memories,
    do_delete_memory,
    do_erase_user,
    do_restore_memory,
    do_supersede_memory,
    do_update_memory,
)
from memory.graph import Scope
from memory.models import Memory, MemoryEntity, MemoryHistory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import UNIT, make_key

ALICE = Scope(user_id="alice")
TEST = Actor.command("test")

Triple = tuple[str, str, str]


def new_memory(
    project: uuid.UUID, text: str, *, user_id: str = "alice", immutable: bool = False, **scope: str
) -> Memory:
    fields = {"user_id": user_id, **scope}
    made = NewMemory(
        text=text, vector=UNIT, scope=fields, metadata={}, categories=[], immutable=immutable
    )
    return do_create_memory(project, made, actor=TEST)


def fresh(memory: Memory) -> Memory:
    """The memory as stored now (the delete actions update rows, not the objects given)."""
    with project_context(memory.project_id):
        memory.refresh_from_db()
    return memory


def assert_edge(
    project: uuid.UUID,
    triple: Triple,
    *,
    valid: bool,
    memory_ids: list[Memory] | None = None,
    scope: Scope = ALICE,
) -> graph.Relation:
    """The newest edge of `triple` in the scope (history included) is as expected."""
    found = [
        r
        for r in graph.relations(project, scope, include_invalid=True, limit=500)
        if (r.source, r.relationship, r.destination) == triple
    ]
    assert found, triple
    edge = max(found, key=lambda r: r.id)
    assert edge.valid is valid, (triple, edge)
    assert (edge.invalidated_at is None) is valid, edge
    if memory_ids is not None:
        assert edge.memory_ids == [str(m.pk) for m in memory_ids], (triple, edge.memory_ids)
    return edge


def properties(project: uuid.UUID, edge_id: int) -> dict[str, Any]:
    """An edge's stored properties, as the application role reads them."""
    with project_context(project):
        name = graph.ensure_graph(project)
        with connection.cursor() as cursor:
            cursor.execute(
                f'SELECT ag_catalog.agtype_out(r.properties)::text FROM {name}."RELATES" r '  # noqa: S608
                "WHERE r.id = %s::ag_catalog.graphid",
                [str(edge_id)],
            )
            (text,) = cursor.fetchone()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def snapshot(project: uuid.UUID) -> list[tuple[str, str, str]]:
    """Every vertex and edge of the project's graph (id, label, properties), or [] if none."""
    name = graph.graph_name(project)
    with project_context(project), connection.cursor() as cursor:
        cursor.execute("SELECT to_regnamespace(%s) IS NOT NULL", [name])
        if not cursor.fetchone()[0]:
            return []
        cursor.execute(
            f"SELECT id::text, 'v', ag_catalog.agtype_out(properties)::text "  # noqa: S608
            f"FROM {name}._ag_label_vertex UNION ALL "
            f"SELECT id::text, 'e', ag_catalog.agtype_out(properties)::text "
            f"FROM {name}._ag_label_edge ORDER BY 1"
        )
        return list(cursor.fetchall())


def dangling_edges(project: uuid.UUID) -> int:
    """Edges whose start or end vertex does not exist."""
    name = graph.graph_name(project)
    with project_context(project), connection.cursor() as cursor:
        graph.ensure_graph(project)
        cursor.execute(
            f"SELECT count(*) FROM {name}._ag_label_edge r "  # noqa: S608
            f"WHERE NOT EXISTS (SELECT 1 FROM {name}._ag_label_vertex v WHERE v.id = r.start_id) "
            f"OR NOT EXISTS (SELECT 1 FROM {name}._ag_label_vertex v WHERE v.id = r.end_id)"
        )
        return int(cursor.fetchone()[0])


def graph_rows_of(project: uuid.UUID, user_id: str) -> tuple[int, int]:
    """(vertices, edges) of the project's graph whose user_id property is `user_id`."""
    rows = snapshot(project)
    mine = [kind for _, kind, props in rows if json.loads(props).get("user_id") == user_id]
    return mine.count("v"), mine.count("e")


class RetractionTests(BaseTestCase):
    def setUp(self) -> None:
        self.a = self.alice.key.project_id
        self.b = self.charlie.key.project_id

    def relate(self, triple: Triple, *memories: Memory, scope: Scope = ALICE) -> graph.Relation:
        relation = None
        for memory in memories:
            relation = graph.upsert_relation(self.a, *triple, scope, memory_id=memory.pk)
        assert relation is not None
        return relation

    def test_deleting_a_memory_invalidates_the_edges_only_it_backed(self) -> None:
        tea, both = new_memory(self.a, "Alice likes tea"), new_memory(self.a, "Alice knows Bob")
        self.relate(("alice", "likes", "tea"), tea)
        self.relate(("alice", "knows", "bob"), tea, both)
        kept = graph.upsert_relation(self.a, "alice", "lives in", "paris", ALICE)  # no memory

        do_delete_memory(tea, actor=TEST)

        edge = assert_edge(self.a, ("alice", "likes", "tea"), valid=False, memory_ids=[tea])
        assert properties(self.a, edge.id)["invalidated_by"] == graph.RETRACTION
        assert ("alice", "likes", "tea") not in {
            (r.source, r.relationship, r.destination) for r in graph.relations(self.a, ALICE)
        }
        assert_edge(self.a, ("alice", "knows", "bob"), valid=True, memory_ids=[tea, both])
        assert_edge(self.a, ("alice", "lives_in", "paris"), valid=True)
        assert graph.traverse(self.a, ALICE, "tea").relations == []
        # The second backer gone too: nothing backs the edge any more.
        do_delete_memory(both, actor=TEST)
        assert_edge(self.a, ("alice", "knows", "bob"), valid=False, memory_ids=[tea, both])
        assert [r.id for r in graph.relations(self.a, ALICE)] == [kept.id]

    def test_superseding_a_memory_retracts_the_old_one(self) -> None:
        old, other = new_memory(self.a, "Alice lives in Paris"), new_memory(self.a, "Alice: Paris")
        self.relate(("alice", "lives in", "paris"), old)
        self.relate(("alice", "visited", "paris"), old, other)
        replacement = NewMemory(
            text="Alice lives in Rome", vector=UNIT, scope={"user_id": "alice"}, metadata={},
            categories=[],
        )  # fmt: skip
        new = do_supersede_memory(old, replacement, actor=Actor.extraction(uuid.uuid4()))
        assert_edge(self.a, ("alice", "lives_in", "paris"), valid=False, memory_ids=[old])
        assert_edge(self.a, ("alice", "visited", "paris"), valid=True, memory_ids=[old, other])
        # The replacement asserts its own relations; the same one again is a new valid edge.
        self.relate(("alice", "lives in", "rome"), new)
        assert_edge(self.a, ("alice", "lives_in", "rome"), valid=True, memory_ids=[new])

    def test_rewording_a_memory_retracts_its_old_relations(self) -> None:
        """Chosen: a memory whose text changes stops backing the relations it asserted (no
        re-extraction here): they are invalidated unless another active memory backs them,
        and it leaves their memory_ids either way."""
        tea, other = new_memory(self.a, "Alice likes tea"), new_memory(self.a, "Alice drinks tea")
        self.relate(("alice", "likes", "tea"), tea)
        self.relate(("alice", "drinks", "tea"), tea, other)
        before = snapshot(self.a)
        # Metadata and an unchanged text are not rewording.
        do_update_memory(tea, actor=TEST, text="Alice likes tea", metadata={"k": "v"})
        assert snapshot(self.a) == before

        do_update_memory(tea, actor=TEST, text="Alice likes coffee now", vector=UNIT)

        assert_edge(self.a, ("alice", "likes", "tea"), valid=False, memory_ids=[])
        assert_edge(self.a, ("alice", "drinks", "tea"), valid=True, memory_ids=[other])
        # The reworded memory no longer keeps the shared edge alive.
        do_delete_memory(other, actor=TEST)
        assert_edge(self.a, ("alice", "drinks", "tea"), valid=False, memory_ids=[other])
        # Nor does restoring the other memory bring back what the rewording took away.
        do_restore_memory(fresh(other), actor=TEST)
        assert_edge(self.a, ("alice", "drinks", "tea"), valid=True, memory_ids=[other])
        assert_edge(self.a, ("alice", "likes", "tea"), valid=False)

    def test_an_earlier_wording_made_current_again_backs_its_relations_again(self) -> None:
        """Issue #50 (part 3, item 2): restoring the old text brings its facts back; the
        edit that ended them names them."""
        tea, other = new_memory(self.a, "Alice likes tea"), new_memory(self.a, "Alice drinks tea")
        self.relate(("alice", "likes", "tea"), tea)
        self.relate(("alice", "drinks", "tea"), tea, other)

        edit = do_update_memory(tea, actor=TEST, text="Alice likes coffee now", vector=UNIT)
        assert [r.phrase() for r in edit.ended] == ["alice → likes → tea"]  # drinks: other backs it
        assert edit.backed_again == []
        assert "alice → likes → tea" in edit.graph_note()
        # A third wording is not the one that backed them.
        edit = do_update_memory(fresh(tea), actor=TEST, text="Alice likes mate", vector=UNIT)
        assert (edit.ended, edit.backed_again) == ([], [])
        assert_edge(self.a, ("alice", "likes", "tea"), valid=False, memory_ids=[])

        edit = do_update_memory(fresh(tea), actor=TEST, text="Alice likes tea", vector=UNIT)

        assert edit.ended == []
        assert sorted(r.phrase() for r in edit.backed_again) == [
            "alice → drinks → tea",
            "alice → likes → tea",
        ]
        likes = assert_edge(self.a, ("alice", "likes", "tea"), valid=True, memory_ids=[tea])
        assert likes.invalidated_by == ""
        assert_edge(self.a, ("alice", "drinks", "tea"), valid=True, memory_ids=[other, tea])
        # Backing them again, it keeps them alive: deleting the other memory ends nothing.
        do_delete_memory(fresh(other), actor=TEST)
        assert_edge(self.a, ("alice", "drinks", "tea"), valid=True, memory_ids=[other, tea])
        # And a second round trip is the same (no duplicate ids, no new edges).
        do_update_memory(fresh(tea), actor=TEST, text="Alice likes coffee now", vector=UNIT)
        edit = do_update_memory(fresh(tea), actor=TEST, text="Alice likes tea", vector=UNIT)
        assert sorted(r.phrase() for r in edit.backed_again) == [
            "alice → drinks → tea",
            "alice → likes → tea",
        ]
        assert_edge(self.a, ("alice", "likes", "tea"), valid=True, memory_ids=[tea])
        edges = list(graph.relations(self.a, ALICE, include_invalid=True, limit=50))
        assert len(edges) == 2

    def test_a_wording_back_joins_a_relation_asserted_again_meanwhile(self) -> None:
        tea, later = new_memory(self.a, "Alice likes tea"), new_memory(self.a, "Alice: tea")
        old = self.relate(("alice", "likes", "tea"), tea)
        do_update_memory(tea, actor=TEST, text="Alice likes coffee", vector=UNIT)
        twin = self.relate(("alice", "likes", "tea"), later)  # a new valid edge, the same fact
        assert twin.id != old.id

        edit = do_update_memory(fresh(tea), actor=TEST, text="Alice likes tea", vector=UNIT)

        assert [r.id for r in edit.backed_again] == [twin.id]
        assert_edge(self.a, ("alice", "likes", "tea"), valid=True, memory_ids=[later, tea])
        stale = properties(self.a, old.id)
        assert stale["valid"] is False  # the old edge stays history

    def test_a_wording_back_does_not_undo_a_contradiction(self) -> None:
        tea, other = new_memory(self.a, "Alice likes tea"), new_memory(self.a, "Alice: tea")
        edge = self.relate(("alice", "likes", "tea"), tea, other)
        do_update_memory(tea, actor=TEST, text="Alice likes coffee", vector=UNIT)
        graph.invalidate_relations(self.a, ALICE, ids=[edge.id])  # a later fact contradicted it

        edit = do_update_memory(fresh(tea), actor=TEST, text="Alice likes tea", vector=UNIT)

        assert edit.backed_again == []
        assert_edge(self.a, ("alice", "likes", "tea"), valid=False, memory_ids=[other])

    def test_a_batch_update_back_to_an_earlier_wording_backs_its_relations(self) -> None:
        tea = new_memory(self.a, "Alice likes tea")
        self.relate(("alice", "likes", "tea"), tea)
        vectors = {"Alice likes mate": UNIT, "Alice likes tea": UNIT}
        do_batch_update([BatchUpdate(tea, "Alice likes mate", None)], actor=TEST, vectors=vectors)
        assert_edge(self.a, ("alice", "likes", "tea"), valid=False, memory_ids=[])
        do_batch_update(
            [BatchUpdate(fresh(tea), "Alice likes tea", None)], actor=TEST, vectors=vectors
        )
        assert_edge(self.a, ("alice", "likes", "tea"), valid=True, memory_ids=[tea])
        assert fresh(tea).language == "en"

    def test_the_relations_of_a_memory_include_those_its_earlier_texts_backed(self) -> None:
        tea, other = new_memory(self.a, "Alice likes tea"), new_memory(self.a, "Alice: tea")
        self.relate(("alice", "likes", "tea"), tea)
        self.relate(("alice", "drinks", "tea"), tea, other)
        self.relate(("alice", "knows", "bob"), other)
        assert [r.relationship for r in graph.memory_relations(self.a, tea.pk)] == [
            "likes",
            "drinks",
        ]
        do_update_memory(tea, actor=TEST, text="Alice likes coffee", vector=UNIT)
        with project_context(self.a):
            edits = list(
                MemoryHistory.objects.filter(memory_id=tea.pk, event="UPDATE").values_list(
                    "pk", flat=True
                )
            )
        assert len(edits) == 1
        assert graph.memory_relations(self.a, tea.pk) == []  # it cites none now
        found = graph.memory_relations(self.a, tea.pk, edits)
        assert [(r.relationship, r.valid) for r in found] == [("likes", False), ("drinks", True)]
        assert graph.memory_relations(self.b, tea.pk, edits) == []  # another project: nothing

    def test_a_batch_update_rewords_like_an_update(self) -> None:
        tea, cake = new_memory(self.a, "Alice likes tea"), new_memory(self.a, "Alice likes cake")
        self.relate(("alice", "likes", "tea"), tea)
        self.relate(("alice", "likes", "cake"), cake)
        do_batch_update(
            [BatchUpdate(tea, "Alice likes mate", None), BatchUpdate(cake, None, {"k": 1})],
            actor=TEST,
            vectors={"Alice likes mate": UNIT},
        )
        assert_edge(self.a, ("alice", "likes", "tea"), valid=False, memory_ids=[])
        assert_edge(self.a, ("alice", "likes", "cake"), valid=True, memory_ids=[cake])

    def test_batch_delete_and_delete_all(self) -> None:
        one, two, three = (new_memory(self.a, f"Alice fact {i}") for i in range(3))
        self.relate(("alice", "knows", "bob"), one, two)
        self.relate(("alice", "knows", "carol"), one, three)
        bobs = new_memory(self.a, "Bob likes tea", user_id="bob")
        bob = Scope(user_id="bob")
        self.relate(("bob", "likes", "tea"), bobs, scope=bob)
        theirs = new_memory(self.b, "Alice likes tea")
        graph.upsert_relation(self.b, "alice", "likes", "tea", ALICE, memory_id=theirs.pk)
        elsewhere = snapshot(self.b)

        # Both backers in one batch: the edge goes; the one backed by a third memory stays.
        do_batch_delete([one, two], actor=TEST)
        assert_edge(self.a, ("alice", "knows", "bob"), valid=False, memory_ids=[one, two])
        assert_edge(self.a, ("alice", "knows", "carol"), valid=True, memory_ids=[one, three])

        with project_context(self.a):
            everything = Memory.objects.for_project(self.alice.key.project).filter(user_id="alice")
            assert do_delete_memories(everything, actor=TEST) == 1
        assert graph.relations(self.a, ALICE) == []
        assert_edge(self.a, ("alice", "knows", "carol"), valid=False)
        # Another scope and another project are untouched.
        assert_edge(self.a, ("bob", "likes", "tea"), valid=True, memory_ids=[bobs], scope=bob)
        assert snapshot(self.b) == elsewhere
        assert dangling_edges(self.a) == 0

    def test_restoring_brings_back_what_its_deletion_invalidated(self) -> None:
        tea, both = new_memory(self.a, "Alice likes tea"), new_memory(self.a, "Alice knows Bob")
        alone = self.relate(("alice", "likes", "tea"), tea)
        shared = self.relate(("alice", "knows", "bob"), tea, both)
        do_delete_memory(tea, actor=TEST)
        do_delete_memory(both, actor=TEST)
        assert graph.relations(self.a, ALICE) == []

        do_restore_memory(fresh(tea), actor=TEST)

        back = assert_edge(self.a, ("alice", "likes", "tea"), valid=True, memory_ids=[tea])
        assert back.id == alone.id  # the same edge, not a copy
        assert properties(self.a, back.id)["invalidated_by"] == ""
        # The edge both backed comes back too: the restored memory backs it.
        again = assert_edge(self.a, ("alice", "knows", "bob"), valid=True, memory_ids=[tea, both])
        assert again.id == shared.id
        assert len(graph.relations(self.a, ALICE, include_invalid=True)) == 2
        # And a second deletion retracts it again.
        do_delete_memory(tea, actor=TEST)
        assert graph.relations(self.a, ALICE) == []

    def test_a_restore_joins_a_relation_asserted_again_meanwhile(self) -> None:
        tea = new_memory(self.a, "Alice likes tea")
        old = self.relate(("alice", "likes", "tea"), tea)
        do_delete_memory(tea, actor=TEST)
        later = new_memory(self.a, "Alice loves tea")
        renewed = self.relate(("alice", "likes", "tea"), later)
        assert renewed.id != old.id

        do_restore_memory(fresh(tea), actor=TEST)

        valid = graph.relations(self.a, ALICE)
        assert [(r.id, r.memory_ids) for r in valid] == [(renewed.id, [str(later.pk), str(tea.pk)])]
        assert_edge(self.a, ("alice", "likes", "tea"), valid=True)  # the newest: renewed
        assert {r.id: r.valid for r in graph.relations(self.a, ALICE, include_invalid=True)} == {
            old.id: False,
            renewed.id: True,
        }
        # Now either memory keeps it: deleting the later one leaves it valid.
        do_delete_memory(later, actor=TEST)
        assert [r.id for r in graph.relations(self.a, ALICE)] == [renewed.id]

    def test_a_contradicted_edge_is_not_brought_back_by_a_restore(self) -> None:
        paris = new_memory(self.a, "Alice lives in Paris")
        edge = self.relate(("alice", "lives in", "paris"), paris)
        graph.invalidate_relations(self.a, ALICE, ids=[edge.id])  # a later fact contradicted it
        contradicted = snapshot(self.a)
        do_delete_memory(paris, actor=TEST)
        assert snapshot(self.a) == contradicted  # already invalid: not touched
        do_restore_memory(fresh(paris), actor=TEST)
        assert snapshot(self.a) == contradicted
        assert "invalidated_by" not in properties(self.a, edge.id)

    def test_an_immutable_memory_refusal_leaves_the_graph_unchanged(self) -> None:
        fixed = new_memory(self.a, "Alice is allergic to nuts", immutable=True)
        self.relate(("alice", "allergic to", "nuts"), fixed)
        before = snapshot(self.a)
        with pytest.raises(ImmutableMemoryError):
            do_delete_memory(fixed, actor=Actor.extraction(uuid.uuid4()))
        with pytest.raises(ImmutableMemoryError):
            do_update_memory(fixed, actor=TEST, text="Alice eats nuts", vector=UNIT)
        with pytest.raises(ImmutableMemoryError):
            do_batch_update([BatchUpdate(fixed, "Alice eats nuts", None)], actor=TEST)
        replacement = NewMemory(
            text="Alice eats nuts", vector=UNIT, scope={"user_id": "alice"}, metadata={},
            categories=[],
        )  # fmt: skip
        with pytest.raises(ImmutableMemoryError):
            do_supersede_memory(fixed, replacement, actor=TEST)
        assert snapshot(self.a) == before
        # A person may still delete it: then its relation goes like any other.
        do_delete_memory(fixed, actor=TEST)
        assert_edge(self.a, ("alice", "allergic_to", "nuts"), valid=False)

    def test_a_delete_in_a_project_without_a_graph_creates_none(self) -> None:
        memories = [new_memory(self.b, f"Alice fact {i}") for i in range(3)]
        with project_context(self.b):  # an entity link alone (written by hand) makes no graph
            MemoryEntity.objects.create(
                project_id=self.b, memory_id=memories[0].pk, entity_name="alice", user_id="alice"
            )
        with CaptureQueriesContext(connection) as queries:
            do_delete_memory(memories[0], actor=TEST)
            do_batch_delete(memories[1:], actor=TEST)
            do_restore_memory(fresh(memories[0]), actor=TEST)
        sql = [q["sql"] for q in queries.captured_queries]
        assert not [s for s in sql if "ag_catalog" in s or "engram_ensure_graph" in s], sql
        # One indexed look-up of the memories' entity links per action, nothing more.
        assert len([s for s in sql if "memory_memoryentity" in s]) == 3
        assert snapshot(self.b) == []
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regnamespace(%s)", [graph.graph_name(self.b)])
            assert cursor.fetchone() == (None,)

    def test_a_memory_linked_to_entities_without_relations_changes_nothing(self) -> None:
        tea, other = new_memory(self.a, "Alice likes tea"), new_memory(self.a, "Alice knows Bob")
        graph.link_memory(self.a, tea.pk, ["Alice", "tea"])
        self.relate(("alice", "knows", "bob"), other)
        before = snapshot(self.a)
        do_delete_memory(tea, actor=TEST)
        do_restore_memory(fresh(tea), actor=TEST)
        assert snapshot(self.a) == before

    def test_many_memories_at_once(self) -> None:
        """More memories than one statement's containment tests (the chunking)."""
        memories = [new_memory(self.a, f"Alice fact {i}") for i in range(450)]
        for memory in memories:
            graph.link_memory(self.a, memory.pk, ["alice"])
        for i in (0, 199, 200, 449):
            self.relate(("alice", "knows", f"friend {i}"), memories[i])
        with project_context(self.a):
            everything = Memory.objects.for_project(self.alice.key.project)
            assert do_delete_memories(everything, actor=TEST) == 450
        assert graph.relations(self.a, ALICE) == []
        assert len(graph.relations(self.a, ALICE, include_invalid=True)) == 4


class GraphErasureTests(BaseTestCase):
    """memory deletion and GDPR erasure leave no orphan edges."""

    def setUp(self) -> None:
        self.a = self.alice.key.project_id
        self.b = self.charlie.key.project_id

    def plant(self, project: uuid.UUID, user_id: str) -> None:
        """The user's graph in two scopes, and bob's beside it, each backed by a memory."""
        mine = new_memory(project, f"{user_id} knows Bob", user_id=user_id)
        with_bot = new_memory(project, f"{user_id} asked the bot", user_id=user_id, agent_id="bot")
        bobs = new_memory(project, "Bob likes tea", user_id="bob")
        user, bot, bob = (
            Scope(user_id=user_id),
            Scope(user_id=user_id, agent_id="bot"),
            Scope(user_id="bob"),
        )
        graph.upsert_relation(project, user_id, "knows", "bob", user, memory_id=mine.pk)
        graph.upsert_relation(project, "bob", "works at", "acme", user, memory_id=mine.pk)
        graph.upsert_relation(project, user_id, "asked", "bot", bot, memory_id=with_bot.pk)
        graph.upsert_relation(project, "bob", "likes", "tea", bob, memory_id=bobs.pk)
        graph.upsert_entity(project, user, "a lone entity")

    def cross_edge(self, project: uuid.UUID, user_id: str) -> None:
        """An edge of bob's that points into the user's vertices (the store never makes one;
        erasure must not leave it dangling)."""
        query = (
            "MATCH (a:Entity), (b:Entity) WHERE a.name = 'bob' AND a.user_id = 'bob' "
            "AND b.name = $name AND b.scope = $scope "
            "CREATE (a)-[r:RELATES {type: 'met', user_id: 'bob', valid: true}]->(b) "
            "RETURN {id: id(r)}"
        )
        with project_context(project):
            name = graph.ensure_graph(project)
            params = {"name": user_id, "scope": Scope(user_id=user_id).key}
            made = graph.age._cypher(name, query, params)
        assert len(made) == 1

    def test_erasure_removes_the_users_graph_and_leaves_no_orphan_edges(self) -> None:
        self.plant(self.a, "alice")
        self.plant(self.b, "alice")  # the same user id in another project
        self.cross_edge(self.a, "alice")
        # Memory deletion first: edges are invalidated, never removed, none left dangling.
        with project_context(self.a):
            alices = list(Memory.objects.filter(user_id="alice"))
        do_batch_delete(alices, actor=TEST)
        assert graph_rows_of(self.a, "alice") == (6, 3)  # alice, bob, acme, lone; alice, bot
        assert dangling_edges(self.a) == 0
        bobs = [row for row in snapshot(self.a) if json.loads(row[2]).get("user_id") == "bob"]
        elsewhere = snapshot(self.b)

        dry = do_erase_user(self.a, "alice", actor="test:dry", dry_run=True)
        assert (dry["graph_entities"], dry["graph_relations"]) == (6, 4)  # + bob's edge into it
        assert graph_rows_of(self.a, "alice") == (6, 3)

        counts = do_erase_user(self.a, "alice", actor="test:erase")

        assert counts == dry
        assert graph_rows_of(self.a, "alice") == (0, 0)
        assert dangling_edges(self.a) == 0
        left = snapshot(self.a)
        assert [row for row in bobs if json.loads(row[2]).get("type") != "met"] == left
        assert snapshot(self.b) == elsewhere
        assert graph_rows_of(self.b, "alice") == (6, 3)
        # Still usable afterwards, and a second erasure finds nothing.
        graph.upsert_relation(self.a, "bob", "likes", "coffee", Scope(user_id="bob"))
        again = do_erase_user(self.a, "alice", actor="test:again")
        assert (again["graph_entities"], again["graph_relations"]) == (0, 0)

    def test_erasure_in_a_project_without_a_graph_creates_none(self) -> None:
        new_memory(self.b, "Alice likes tea")
        counts = do_erase_user(self.b, "alice", actor="test:nograph")
        assert counts["memories"] == 1
        assert (counts["graph_entities"], counts["graph_relations"]) == (0, 0)
        assert snapshot(self.b) == []

    def test_hostile_user_ids_through_erasure(self) -> None:
        hostile = [
            "$$",
            "it's",
            'say "hi"',
            "back\\slash \\' \\\" \\\\",
            "}) DETACH DELETE n //",
            "'); DROP TABLE memory_memory; --",
            '{"user_id": "bob"}',
            "%I %s %L",
            "emoji 🦜🧠 and zwj 👩‍💻",
            "tab\tnew\nline",
            "x" * 255,
        ]
        self.plant(self.a, "bob")  # bob's graph must survive every erasure
        for user_id in hostile:
            self.plant(self.a, user_id)
        bobs = [row for row in snapshot(self.a) if json.loads(row[2]).get("user_id") == "bob"]
        for user_id in hostile:
            assert graph_rows_of(self.a, user_id) == (6, 3), user_id
            counts = do_erase_user(self.a, user_id, actor="test:hostile")
            assert (counts["graph_entities"], counts["graph_relations"]) == (6, 3), user_id
            assert graph_rows_of(self.a, user_id) == (0, 0), user_id
        assert snapshot(self.a) == bobs  # only bob's graph is left, unchanged
        assert dangling_edges(self.a) == 0


@pytest.mark.usefixtures("committed_db")
def test_concurrent_deletes_of_an_edges_two_backers_invalidate_it() -> None:
    """Each delete sees the other backer active in its own snapshot; the edge locks make the
    second wait for the first and read its deletion."""
    key = make_key("acme", "race")
    project = key.key.project_id
    first, second = new_memory(project, "Alice knows Bob"), new_memory(project, "Bob knows Alice")
    for memory in (first, second):
        graph.upsert_relation(project, "alice", "knows", "bob", ALICE, memory_id=memory.pk)
    errors: list[BaseException] = []

    def delete_second() -> None:
        try:
            do_delete_memory(second, actor=TEST)
        except BaseException as error:  # reported by the main thread
            errors.append(error)
        finally:
            connections.close_all()

    with project_context(project):
        do_delete_memory(first, actor=TEST)
        other = threading.Thread(target=delete_second)
        other.start()
        # Wait until the other transaction waits on this one's lock of the edge.
        _until_another_transaction_waits()
    other.join()
    assert errors == []
    assert graph.relations(project, ALICE) == []
    assert_edge(project, ("alice", "knows", "bob"), valid=False, memory_ids=[first, second])


class LockKeyTests(BaseTestCase):
    def test_retraction_takes_the_lock_upsert_relation_takes(self) -> None:
        """The serialisation with upsert_relation rests on the same advisory key."""
        project = self.alice.key.project_id
        memory = new_memory(project, 'Ünïcode Alice likes "tea"', run_id="r'1")
        upserted: list[str] = []
        real_lock = graph.age._lock

        def lock(*parts: str) -> None:
            if parts[1] == "relation":
                upserted.append(json.dumps(parts, ensure_ascii=False))
            real_lock(*parts)

        with mock.patch.object(graph.writes, "_lock", lock):
            graph.upsert_relation(
                project, "Ünïcode Alice", "likes", '"tea"', Scope(user_id="alice", run_id="r'1"),
                memory_id=memory.pk,
            )  # fmt: skip
        retracted: list[str] = []
        real_run = graph.age._run

        def run(name: str, statement: str, params: Any) -> list[tuple[Any, ...]]:
            if statement == graph.statements._LOCK_KEYS:
                retracted.extend(params[0])
            return real_run(name, statement, params)

        with mock.patch.object(graph.retraction, "_run", run):
            assert len(graph.retract_memories(project, [memory.pk])) == 1
        assert retracted == upserted
        assert len(upserted) == 1


def _without_deadlock(project: uuid.UUID, work: Any) -> list[BaseException]:
    """Run `work` in a thread while this transaction holds the lock of entity "amy" and then
    takes the lock of "zed": a writer that locks entities as it meets them (zed first, then
    amy) deadlocks with it; one that takes them in key order waits on "amy" holding nothing."""
    other, errors = _in_thread(work)
    with project_context(project):
        graph.lock_entities(project, ALICE, ["Amy"])
        other.start()
        _until_another_transaction_waits()
        graph.lock_entities(project, ALICE, ["Zed"])
    other.join()
    return errors


def _in_thread(work: Any) -> tuple[threading.Thread, list[BaseException]]:
    """A thread (not started) running `work` on its own connection, and the list its error, if
    any, lands in for the main thread to check."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:  # reported by the main thread
            errors.append(error)
        finally:
            connections.close_all()

    return threading.Thread(target=run), errors


def _until_another_transaction_waits() -> None:
    with connection.cursor() as cursor:
        for _ in range(10_000):
            cursor.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                "WHERE NOT l.granted AND d.datname = current_database()"
            )
            if cursor.fetchone()[0]:
                return
            cursor.execute("SELECT pg_sleep(0.01)")
    pytest.fail("the other transaction never waited for this one")


@pytest.mark.usefixtures("committed_db")
def test_two_first_uses_of_a_projects_graph_at_once_both_succeed() -> None:
    """The second waits for the first's creation of the graph, then uses it."""
    project = make_key("acme", "first").key.project_id

    def ensure() -> None:
        with project_context(project):
            graph.ensure_graph(project)

    other, errors = _in_thread(ensure)
    with project_context(project):
        graph.ensure_graph(project)
        other.start()
        _until_another_transaction_waits()
    other.join()
    assert errors == []


@pytest.mark.usefixtures("committed_db")
def test_linking_entities_met_in_opposite_orders_does_not_deadlock() -> None:
    """The worker's entity linking (link_entities jobs) and the extraction's graph writes take
    every entity lock of a transaction first, in key order."""
    key = make_key("acme", "locks")
    project = key.key.project_id
    zed, amy = new_memory(project, "Yesterday Zed came"), new_memory(project, "Today Amy came")
    with project_context(project):
        graph.ensure_graph(project)  # made and committed first: its lock is not the point here
    errors = _without_deadlock(
        project, lambda: graph.mentions.link_mentions(project, [zed.pk, amy.pk])
    )
    assert errors == []
    with project_context(project):
        linked = set(MemoryEntity.objects.values_list("memory_id", "entity_name"))
    assert linked == {(zed.pk, "zed"), (amy.pk, "amy")}

    later, again = new_memory(project, "Zed knows Amy"), new_memory(project, "Amy knows Zed")
    from memory.actions import do_record_graph

    errors = _without_deadlock(
        project,
        lambda: do_record_graph(
            project,
            {"user_id": "alice"},
            assertions=[],
            mentions={later.pk: [("Zed", "person")], again.pk: [("Amy", "person")]},
        ),
    )
    assert errors == []
    with project_context(project):
        assert MemoryEntity.objects.filter(memory_id__in=[later.pk, again.pk]).count() == 2
