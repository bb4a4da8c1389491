"""Graph extraction in the worker job (issue #9): entities, relations, contradictions.

Claude is faked at the HTTP boundary (the graph calls take replies scripted for their tool);
the graph is the real AGE graph of the project.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from memory import graph
from memory.extraction.llm.clean import clean_relations
from memory.extraction.llm.offline import (
    EXCLUSIVE,
    OfflineExtractor,
    offline_triples,
    only_states,
)
from memory.extraction.llm.types import EntityRef, Fact, Triple
from memory.extraction.pipeline import attempt
from memory.models import Memory, MemoryEntity, MemoryEvent
from tenants.db import project_context
from tests.fake_anthropic import Reply
from tests.memory.test_pipeline import SCOPE, ExtractionTestCase, add, facts

ALICE = graph.Scope(user_id="alice")


def entities(*pairs: tuple[str, str]) -> Reply:
    return Reply({"entities": [{"name": n, "type": t} for n, t in pairs]}, tool="record_entities")


def relations(*triples: tuple[str, str, str, int]) -> Reply:
    items = [
        {"source": s, "relationship": r, "destination": d, "fact": f} for s, r, d, f in triples
    ]
    return Reply({"relations": items}, tool="record_relations")


def contradicted(*ids: str) -> Reply:
    return Reply({"contradicted": list(ids)}, tool="record_contradictions")


def edges(project: Any, *, include_invalid: bool = False) -> set[tuple[str, str, str, bool]]:
    found = graph.relations(project, ALICE, include_invalid=include_invalid, limit=500)
    return {(r.source, r.relationship, r.destination, r.valid) for r in found}


class GraphExtractionTestCase(ExtractionTestCase):
    def prompt(self, tool: str) -> str:
        return str(next(r["prompt"] for r in self.fake.requests if r["tool"] == tool))

    def lives_in(self, city: str, *, contradiction: Reply | None = None) -> MemoryEvent:
        text = f"User lives in {city}"
        self.fake.script(
            facts(text), add(),
            entities(("User", "person"), (city, "location")),
            relations(("User", "lives in", city, 0)),
        )  # fmt: skip
        if contradiction is not None:
            self.fake.script(contradiction)
        return self.run_event(self.event(f"I live in {city} now"))

    def test_it_stores_typed_entities_and_relations_citing_the_memory(self) -> None:
        done = self.lives_in("Paris")
        assert self.tools() == [
            "record_facts",
            "record_entities",
            "record_relations",
        ]  # fmt: skip (nothing stored: no decide call; no existing edge: no contradiction call)
        [memory] = self.memories(state="active")
        [edge] = graph.relations(self.project.pk, ALICE)
        assert (edge.source, edge.relationship, edge.destination, edge.valid) == (
            "alice", "lives_in", "paris", True
        )  # fmt: skip
        assert (edge.memory_ids, edge.event_id) == ([str(memory.id)], str(done.id))
        paris = graph.find_entity(self.project.pk, ALICE, "Paris")
        assert paris is not None
        assert (paris.display_name, paris.type) == ("Paris", "location")
        with project_context(self.project.pk):
            linked = set(
                MemoryEntity.objects.filter(memory=memory).values_list("entity_name", flat=True)
            )
        assert linked == {"alice", "paris"}
        added = {
            "id": edge.id,
            "source": "alice",
            "relationship": "lives_in",
            "destination": "paris",
        }
        assert done.graph["added"] == [added]
        # The relation call was given the entity whitelist and the numbered facts.
        assert "- Paris (location)" in self.prompt("record_relations")
        assert "0. User lives in Paris" in self.prompt("record_relations")
        entities_call = next(r for r in self.fake.requests if r["tool"] == "record_entities")
        assert '"alice"' in entities_call["system"]

    def test_a_contradiction_invalidates_the_old_edge_and_keeps_it_as_history(self) -> None:
        self.lives_in("Paris")
        done = self.lives_in("Rome", contradiction=contradicted("0"))
        assert "id 0: alice -- lives_in --> paris" in self.prompt("record_contradictions")
        assert edges(self.project.pk) == {("alice", "lives_in", "rome", True)}
        assert edges(self.project.pk, include_invalid=True) == {
            ("alice", "lives_in", "rome", True), ("alice", "lives_in", "paris", False)
        }  # fmt: skip
        [old] = [r for r in graph.relations(self.project.pk, ALICE, include_invalid=True)
                 if not r.valid]  # fmt: skip
        assert old.invalidated_at
        assert [r["destination"] for r in done.graph["invalidated"]] == ["paris"]

    def test_a_compatible_fact_adds_a_second_edge(self) -> None:
        self.lives_in("Paris")
        self.fake.script(
            facts("User likes ramen"), add(),
            entities(("User", "person"), ("ramen", "food")),
            relations(("User", "likes", "ramen", 0)),
        )  # fmt: skip
        self.run_event(self.event("I like ramen"))
        self.fake.script(
            facts("User likes sushi"), add(),
            entities(("User", "person"), ("sushi", "food")),
            relations(("User", "likes", "sushi", 0)),
            contradicted(),  # liking sushi does not end liking ramen
        )  # fmt: skip
        self.run_event(self.event("I like sushi too"))
        assert edges(self.project.pk) == {
            ("alice", "lives_in", "paris", True),
            ("alice", "likes", "ramen", True),
            ("alice", "likes", "sushi", True),
        }

    def test_a_repeated_triple_merges_into_one_edge_citing_both_memories(self) -> None:
        self.lives_in("Paris")
        text = "User has lived in Paris since 2019"
        self.fake.script(
            facts(text), add(),
            entities(("I", "person"), ("paris", "location")),
            relations(("me", "lives_in", "PARIS", 0)),
            contradicted(),
        )  # fmt: skip
        self.run_event(self.event("I've lived in Paris since 2019"))
        [edge] = graph.relations(self.project.pk, ALICE, include_invalid=True)
        assert len(edge.memory_ids) == 2
        assert set(edge.memory_ids) == {str(m.id) for m in self.memories(state="active")}

    def test_triples_outside_the_whitelist_or_facts_are_dropped(self) -> None:
        self.fake.script(
            facts("User lives in Paris"), add(),
            entities(("User", "person"), ("Paris", "location")),
            relations(
                ("User", "lives_in", "Paris", 0),
                ("User", "works_at", "Acme", 0),  # Acme was not listed
                ("User", "visits", "Paris", 7),  # no fact 7
            ),
        )  # fmt: skip
        done = self.run_event(self.event("I live in Paris"))
        assert edges(self.project.pk) == {("alice", "lives_in", "paris", True)}
        assert "'Acme'" in done.error
        assert "unknown fact 7" in done.error
        assert graph.find_entity(self.project.pk, ALICE, "Acme") is None

    def test_an_invented_contradiction_id_is_rejected(self) -> None:
        self.lives_in("Paris")
        done = self.lives_in("Rome", contradiction=contradicted("5"))
        assert "'5', which was not shown" in done.error
        assert edges(self.project.pk) == {
            ("alice", "lives_in", "paris", True), ("alice", "lives_in", "rome", True)
        }  # fmt: skip

    def test_unusable_graph_output_fails_the_graph_only(self) -> None:
        self.fake.script(
            facts("User lives in Paris"), add(),
            # Not a list, twice (a malformed reply is asked for once more).
            Reply({"entities": "User, Paris"}, tool="record_entities", repeat=True),
        )  # fmt: skip
        done = self.run_event(self.event("I live in Paris"))
        assert done.status == "SUCCEEDED"
        assert [m.text for m in self.memories()] == ["User lives in Paris"]
        assert done.graph == {"status": "FAILED"}
        assert "graph: record_entities input is malformed" in done.error
        assert edges(self.project.pk, include_invalid=True) == set()

    def test_a_transient_graph_error_retries_the_whole_event_and_stores_nothing(self) -> None:
        self.fake.script(
            facts("User lives in Paris"), add(),
            Reply(status=529, error_type="overloaded_error", tool="record_entities"),
        )  # fmt: skip
        event = self.event("I live in Paris")
        delay = attempt(event.id, self.project.pk, self.model)  # what a worker runs
        with project_context(self.project.pk):
            done = MemoryEvent.objects.get(pk=event.pk)
        assert (done.status, done.attempts, delay is not None) == ("PENDING", 1, True)
        assert "Error code: 529" in done.error  # the SDK's error, whichever the provider
        assert self.memories() == []

    def test_known_facts_make_no_graph_calls(self) -> None:
        self.existing("User likes green tea")
        self.fake.script(facts("User likes green tea"))
        done = self.run_event(self.event("Green tea is my favourite"))
        assert self.tools() == ["record_facts"]
        assert done.graph == {"status": "SKIPPED"}

    @override_settings(ENGRAM_GRAPH_EXTRACTION=False)
    def test_graph_extraction_can_be_turned_off(self) -> None:
        self.fake.script(facts("User likes tea"), add())
        done = self.run_event(self.event("I like tea"))
        assert self.tools() == ["record_facts"]  # nothing stored near it: no decide call
        assert (done.status, done.graph) == ("SUCCEEDED", {"status": "SKIPPED"})

    def test_hostile_names_are_stored_exactly_and_touch_nothing_else(self) -> None:
        self.lives_in("Paris")
        hostile = "}) DETACH DELETE n // $$ 'q' \"dq\" \\ ü 東京"
        text = f"User likes {hostile}"
        self.fake.script(
            facts(text), add(),
            entities(("User", "person"), (hostile, "work")),
            relations(("User", "likes", hostile, 0)),
            contradicted(),
        )  # fmt: skip
        self.run_event(self.event("I like that"))
        assert edges(self.project.pk) == {
            ("alice", "lives_in", "paris", True),
            ("alice", "likes", graph.normalise_name(hostile), True),
        }
        entity = graph.find_entity(self.project.pk, ALICE, hostile)
        assert entity is not None
        assert entity.display_name == hostile

    def test_the_offline_extractor_builds_and_corrects_the_graph(self) -> None:
        offline = OfflineExtractor()
        for message in (
            "I live in Paris.",
            "I love sushi.",
            "I love ramen.",
            "My dog is called Rex.",
        ):
            self.run_event(self.event(message), offline)
        assert edges(self.project.pk) == {
            ("alice", "lives_in", "paris", True),
            ("alice", "likes", "sushi", True),
            ("alice", "likes", "ramen", True),
            ("alice", "has_dog", "rex", True),
        }
        self.run_event(self.event("I just moved to Berlin."), offline)
        self.run_event(self.event("I don't like sushi anymore."), offline)
        assert edges(self.project.pk) == {
            ("alice", "lives_in", "berlin", True),
            ("alice", "dislikes", "sushi", True),
            ("alice", "likes", "ramen", True),
            ("alice", "has_dog", "rex", True),
        }
        invalid = edges(self.project.pk, include_invalid=True) - edges(self.project.pk)
        assert invalid == {
            ("alice", "lives_in", "paris", False),
            ("alice", "likes", "sushi", False),
        }
        with project_context(self.project.pk):
            berlin = Memory.objects.get(text="I just moved to Berlin.")
            linked = set(
                MemoryEntity.objects.filter(memory=berlin).values_list("entity_name", flat=True)
            )
        assert linked == {"alice", "berlin"}

    def test_a_scope_without_user_or_agent_has_no_self_entity(self) -> None:
        scope = {**SCOPE, "user_id": None, "run_id": "r1"}
        self.fake.script(
            facts("Paris is in France"), add(),
            entities(("User", "person"), ("Paris", "location"), ("France", "location")),
            relations(("Paris", "located_in", "France", 0), ("User", "visits", "Paris", 0)),
        )  # fmt: skip
        done = self.run_event(self.event("Paris is in France", scope=scope))
        found = graph.relations(self.project.pk, graph.Scope(run_id="r1"))
        assert [(r.source, r.relationship, r.destination) for r in found] == [
            ("paris", "located_in", "france")
        ]
        assert "'User'" in done.error


def test_clean_relations_keeps_only_listed_entities_and_cited_facts() -> None:
    listed = [EntityRef("alice", "person"), EntityRef("Paris", "location")]
    found = clean_relations(
        [
            Triple("I", "Lives In", "paris", 0),
            Triple("I", "lives_in", "Paris", 0),  # the same once normalised
            Triple("alice", "likes", "alice", 0),  # a loop
            Triple("alice", "visits", "Rome", 0),
            Triple("alice", "visits", "Paris", 3),
        ],
        listed,
        "alice",
        facts=1,
    )
    assert found.triples == [Triple("alice", "lives_in", "Paris", 0)]
    assert len(found.rejected) == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I love hiking in the mountains", [("me", "likes", "hiking")]),
        ("I don't like sushi anymore", [("me", "dislikes", "sushi")]),
        ("I live in Paris and I work at Acme Corp.",
         [("me", "lives_in", "Paris"), ("me", "works_at", "Acme Corp")]),
        ("I moved to Berlin last month", [("me", "lives_in", "Berlin")]),
        ("I am allergic to peanuts", [("me", "allergic_to", "peanuts")]),
        ("My sister's name is Anna Lee", [("me", "has_sister", "Anna Lee")]),
        ("My partner's name is Sam now.", [("me", "has_partner", "Sam")]),
        ("my boss is called Priya", [("me", "has_boss", "Priya")]),
        ("My mum is called Ann", [("me", "has_mother", "Ann")]),
        ("My mom's name is Ann", [("me", "has_mother", "Ann")]),
        ("My dad is Bob", [("me", "has_father", "Bob")]),
        ("My husband Tomás is a structural engineer.", []),
        ("The weather is nice", []),
    ],
)  # fmt: skip
def test_offline_triples(text: str, expected: list[tuple[str, str, str]]) -> None:
    assert offline_triples(text, "me") == expected


@pytest.mark.parametrize(
    ("text", "relationships", "expected"),
    [
        ("I live in Porto now.", {"lives_in"}, True),
        ("My partner is called Sam.", {"has_partner"}, True),
        ("My partner's name is Sam now.", {"has_partner"}, True),
        ("My boss's name is Priya.", {"has_boss"}, True),
        ("My mum is called Ann.", {"has_mother"}, True),
        ("My dad is Bob.", {"has_father"}, True),
        ("My partner is called Sam.", {"has_boss"}, False),
        ("My partner is called Sam and Sam is a nurse.", {"has_partner"}, False),
        ("My husband Tomás is a structural engineer.", {"has_husband"}, False),
        ("I live in Porto and my boss is called Priya.", {"lives_in"}, False),
        ("My dog is called Rex.", EXCLUSIVE, False),
    ],
)  # fmt: skip
def test_only_states(text: str, relationships: set[str], expected: bool) -> None:
    assert only_states(text, relationships) is expected


def test_pets_children_siblings_and_friends_are_not_exclusive() -> None:
    named = {"has_wife", "has_husband", "has_partner", "has_mother", "has_father", "has_boss"}
    assert named | {"has_manager"} <= EXCLUSIVE
    assert not {"has_dog", "has_cat", "has_pet", "has_son", "has_daughter", "has_child",
                "has_kid", "has_brother", "has_sister", "has_friend"} & EXCLUSIVE  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_offline_graph_never_raises_and_stays_bounded(text: str) -> None:
    offline = OfflineExtractor()
    found, _ = offline.entities([Fact(text)], "me")
    rels, _ = offline.relations([Fact(text)], found, "me")
    assert all(len(e.name.split()) <= 6 for e in found if e.name != "me")
    assert all(t.source == "me" and t.fact == 0 for t in rels.triples)
