"""From the extracted facts to the decisions to apply.

- `capped` and `checked_categories`: the limits on what the model gave (facts per event, the
  configured categories);
- `prepare`: the facts embedded, their exact duplicates among the scope's memories, and each
  fact's nearest memories above the similarity floor (what decide is shown);
- `settle`: the model's decisions made exactly one fate per candidate, no fact lost.

May import memory.models, memory.queries, memory.text, tenants, llm.types and
extraction.context.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Value
from pgvector.django import CosineDistance

from memory.extraction.context import DEFAULT_CATEGORIES
from memory.extraction.llm.types import Decision, Existing, Fact
from memory.models import Memory, content_hash
from memory.queries import scope_memories
from memory.text.embeddings import Vectors, embed
from tenants.db import project_context

NEIGHBOURS = 5  # existing memories shown to the model per candidate fact
# The decide step shows the model only the existing memories at least this similar (cosine) to
# a candidate fact: below it nothing can be the same fact or contradict it (measured with the
# local embedder: unrelated facts 0.23-0.29, a change of employer 0.35, of home 0.76). A fact
# with none is ADDed without a model call.
SIMILARITY_FLOOR = 0.3


@dataclass(frozen=True)
class Prepared:
    facts: list[Fact]
    vectors: Vectors
    duplicates: dict[int, Memory]  # fact index -> active memory with the same text
    neighbours: list[list[Existing]]


def settle(
    decided: Sequence[Decision],
    facts: Sequence[Fact],
    open_facts: Sequence[int],
    asked: Sequence[int] = (),
) -> tuple[list[Decision], list[str]]:
    """The decisions to apply: exactly one fate per open candidate, no fact lost.

    A candidate's fate is its first ADD, UPDATE or NONE; a later one for the same candidate is
    ignored. DELETEs are extra (a contradicted memory goes; a candidate whose only decisions are
    DELETEs stated an end and is not stored itself); at most ENGRAM_MAX_DELETES_PER_EVENT per
    event. One memory is written (updated or deleted) once per event: a second UPDATE of it
    becomes an ADD of its candidate, a second DELETE is ignored. A candidate left without any
    decision (none given, or one naming a memory that was not shown) is ADDed with its own text.
    Returns the decisions in the model's order, the added fall-backs last, and notes for the
    event's error on everything changed.
    """
    notes: list[str] = []
    chosen: list[Decision] = []
    fate: set[int] = set()
    written: set[uuid.UUID] = set()
    deletes = 0
    limit = settings.ENGRAM_MAX_DELETES_PER_EVENT
    for given in decided:
        index, target = given.fact, given.memory_id
        if given.event == "DELETE":
            if target in written:
                notes.append(f"DELETE of {target}: written once already in this event, ignored")
            elif deletes >= limit:
                notes.append(f"DELETE of {target}: over the limit of {limit} per event, ignored")
            elif target is not None:
                deletes += 1
                written.add(target)
                chosen.append(given)
            continue
        if index in fate:
            notes.append(f"a second decision for candidate {index} ({given.event}), ignored")
            continue
        decision = given
        if given.event == "UPDATE" and target in written:
            notes.append(f"UPDATE of {target}: written once already in this event, added instead")
            decision = Decision("ADD", index, None, facts[index].text)
        if decision.event == "UPDATE" and target is not None:
            written.add(target)
        fate.add(index)
        chosen.append(decision)
    ended = {d.fact for d in chosen if d.event == "DELETE"}
    for index in open_facts:
        if index not in fate and index not in ended:
            if index in asked:  # the model gave it no usable decision
                notes.append(f"no decision for candidate {index}: added")
            chosen.append(Decision("ADD", index, None, facts[index].text))
    return chosen, notes


def capped(facts: Sequence[Fact]) -> tuple[list[Fact], list[str]]:
    """The first ENGRAM_MAX_FACTS_PER_EVENT facts (what one event may embed, compare and
    store), with a note when more were extracted."""
    limit: int = settings.ENGRAM_MAX_FACTS_PER_EVENT
    if len(facts) <= limit:
        return list(facts), []
    return list(facts[:limit]), [
        f"{len(facts)} candidate facts, above ENGRAM_MAX_FACTS_PER_EVENT: kept the first {limit}"
    ]


def checked_categories(
    facts: Sequence[Fact], allowed: Sequence[str]
) -> tuple[list[Fact], list[str]]:
    """Each fact's category, lower-cased, if it is one of `allowed` (Mem0's defaults when
    none are configured); another is dropped (the fact is kept), with a note."""
    names = {c.lower() for c in (allowed or DEFAULT_CATEGORIES)}
    checked, notes = [], []
    for fact in facts:
        category = fact.category.strip().lower() if fact.category else None
        if category and category not in names:
            notes.append(f"category {fact.category!r} is not configured, dropped")
            category = None
        checked.append(
            Fact(fact.text, category, fact.confidence, fact.positions)
            if category != fact.category
            else fact
        )
    return checked, notes


def prepare(project_id: uuid.UUID, scope: dict[str, Any], facts: Sequence[Fact]) -> Prepared:
    """Embed the facts; find exact duplicates and each fact's nearest existing memories."""
    vectors = embed([f.text for f in facts])
    duplicates: dict[int, Memory] = {}
    neighbours: list[list[Existing]] = []
    with project_context(project_id):
        memories = scope_memories(project_id, scope).light()
        by_hash = {
            m.hash: m for m in memories.filter(hash__in=[content_hash(f.text) for f in facts])
        }
        for index, (fact, vector) in enumerate(zip(facts, vectors, strict=True)):
            if content_hash(fact.text) in by_hash:
                duplicates[index] = by_hash[content_hash(fact.text)]
            nearest = (
                # "+ 0" hides the operator from the HNSW index: a scope is small enough to rank
                # exactly (as search does), and a filtered approximate walk may miss its rows.
                memories.annotate(distance=CosineDistance("embedding", vector) + Value(0.0))
                .order_by("distance")
                .values_list("id", "text", "distance", "created_at")[:NEIGHBOURS]
            )
            # Only memories near in meaning are shown (SIMILARITY_FLOOR).
            neighbours.append(
                [
                    Existing(pk, text, 1 - distance, when.date())
                    for pk, text, distance, when in nearest
                    if 1 - distance >= SIMILARITY_FLOOR
                ]
            )
    return Prepared(list(facts), vectors, duplicates, neighbours)
