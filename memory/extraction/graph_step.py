"""The graph step of an event: entities, relations and contradictions over the facts that
become new memories.

- `plan_graph`: the three model calls, into a GraphPlan (unusable model output fails this step
  only: the facts are stored all the same); `related_edges`: the existing edges the
  contradiction call is shown;
- `ended_by` and `superseding`: an exclusive relationship given a new value (a home, an
  employer, a job, a spouse, a partner, a parent, a boss: llm.offline.EXCLUSIVE) makes the ADD
  of the new value the UPDATE of the memory that stated only the old one;
- `record_graph`: the plan applied through memory.actions, in the transaction that applies the
  decisions (extraction.apply).

May import memory.actions, memory.graph, memory.models, memory.queries, tenants, llm.types,
llm.offline and extraction.claims.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from memory import actions, graph
from memory.actions import GraphAssertion
from memory.extraction.claims import Run, renew
from memory.extraction.llm.offline import EXCLUSIVE, only_states
from memory.extraction.llm.types import (
    Decision,
    EntityRef,
    Extractor,
    Fact,
    KnownEdge,
    ModelOutputError,
    Triple,
)
from memory.models import Memory, MemoryEvent
from memory.queries import scope_memories
from tenants.db import project_context

KNOWN_EDGES = 50  # existing relations shown to the model when checking contradictions


@dataclass
class GraphPlan:
    """What the graph step learned, applied with the decisions (do_record_graph).

    status: SUCCEEDED, SKIPPED (no new memory, graph extraction off, or a scope with nothing to
    anchor on) or FAILED (the model's graph output was unusable: the facts are stored all the
    same, the reason is in the event's error).
    """

    status: str = "SKIPPED"
    entities: list[EntityRef] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)  # `fact` indexes the event's facts
    contradicted: list[int] = field(default_factory=list)
    # Fact index -> the exclusive relationships its triples ended, and the memories behind them.
    ended: dict[int, Ended] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)

    def names(self) -> list[str]:
        """The entity names the plan may record (its entities and its triples' ends)."""
        if self.status != "SUCCEEDED":
            return []
        ends = [name for t in self.triples for name in (t.source, t.destination)]
        return [e.name for e in self.entities] + ends


@dataclass
class Ended:
    relationships: set[str] = field(default_factory=set)
    memory_ids: set[str] = field(default_factory=set)


def self_name(scope: dict[str, Any]) -> str | None:
    """The entity "User" / "I" / "me" stand for: the scope's user_id, or its agent_id."""
    return scope.get("user_id") or scope.get("agent_id") or None


def plan_graph(
    job: Run, facts: Sequence[Fact], chosen: Sequence[Decision], extractor: Extractor
) -> GraphPlan:
    """Entities, relations and contradictions for the facts that become new memories.

    Facts already known (NONE, exact repeats) are skipped: their relations were taken when they
    were first stored. Unusable model output fails the graph step only (FAILED, the facts are
    stored); any other failure (rate limit, timeout) is the event's, retried whole.
    """
    new = sorted({d.fact for d in chosen if d.event in ("ADD", "UPDATE")})
    me = self_name(job.scope)
    if not settings.ENGRAM_GRAPH_EXTRACTION or not new:
        return GraphPlan()
    shown = [facts[i] for i in new]
    try:
        renew(job.claim)
        entities, usage = extractor.entities(shown, me)
        job.usage.add(usage)
        plan = GraphPlan("SUCCEEDED", entities)
        if len(entities) < 2:  # a relation needs two ends
            return plan
        renew(job.claim)
        found, usage = extractor.relations(shown, entities, me)
        job.usage.add(usage)
        plan.rejected += found.rejected
        plan.triples = [
            Triple(t.source, t.relationship, t.destination, new[t.fact]) for t in found.triples
        ]
        if not plan.triples:
            return plan
        known = related_edges(job, plan.triples, me)
        if known:
            renew(job.claim)
            edges = [KnownEdge(r.id, r.source, r.relationship, r.destination) for r in known]
            contradictions, usage = extractor.contradictions(plan.triples, edges)
            job.usage.add(usage)
            plan.contradicted, plan.rejected = (
                contradictions.edge_ids,
                plan.rejected + contradictions.rejected,
            )
            plan.ended = ended_by(plan.triples, [r for r in known if r.id in plan.contradicted])
    except ModelOutputError as exc:
        return GraphPlan("FAILED", rejected=[f"graph: {exc}"])
    return plan


def ended_by(triples: Sequence[Triple], edges: Sequence[graph.Relation]) -> dict[int, Ended]:
    """For each fact, the contradicted edges of an exclusive relationship (llm.offline.EXCLUSIVE:
    a home, employer, job, spouse, partner, parent or boss) its triples give another value to."""
    found: dict[int, Ended] = {}
    for edge in edges:
        if edge.relationship not in EXCLUSIVE:
            continue
        source, destination = (
            graph.normalise_name(edge.source),
            graph.normalise_name(edge.destination),
        )
        for triple in triples:
            if (triple.relationship, graph.normalise_name(triple.source)) == (
                edge.relationship,
                source,
            ) and graph.normalise_name(triple.destination) != destination:
                ended = found.setdefault(triple.fact, Ended())
                ended.relationships.add(edge.relationship)
                ended.memory_ids.update(edge.memory_ids)
    return found


def superseding(
    project_id: uuid.UUID, scope: dict[str, Any], chosen: Sequence[Decision], plan: GraphPlan
) -> list[Decision]:
    """The decisions, an ADD that ends an exclusive relationship made the UPDATE of the memory
    that stated only its old value, so that memory is superseded (history, `replaced_by`)
    instead of staying current beside the new one.

    The decide step finds what to replace by meaning, and the two statements of a move are not
    near ("I live in Austin." and "I moved to Porto.": 0.27, under decide.SIMILARITY_FLOOR), so
    without a model both would stay active; the graph's contradiction step knows the old edge
    and the memories behind it. A memory that says more
    than the ended relationship (llm.offline.only_states) is left as it is; its edge still ends.
    """
    if not plan.ended:
        return list(chosen)
    ids = {m for ended in plan.ended.values() for m in ended.memory_ids}
    with project_context(project_id):
        newest_first = list(
            scope_memories(project_id, scope).light().filter(pk__in=ids).order_by("-created_at")
        )
    taken = {d.memory_id for d in chosen if d.memory_id}
    decisions = []
    for decision in chosen:
        ended = plan.ended.get(decision.fact) if decision.event == "ADD" else None
        old = next((m for m in newest_first if _replaces(m, ended, taken)), None) if ended else None
        if old is not None:
            taken.add(old.pk)
        decisions.append(
            decision if old is None else Decision("UPDATE", decision.fact, old.pk, decision.text)
        )
    return decisions


def _replaces(memory: Memory, ended: Ended, taken: set[uuid.UUID]) -> bool:
    return (
        str(memory.pk) in ended.memory_ids
        and memory.pk not in taken
        and only_states(memory.text, ended.relationships)
    )


SELF_MENTION = re.compile(r"\b(?:user|i|me|my|mine|myself)\b", re.IGNORECASE)


def related_edges(job: Run, triples: Sequence[Triple], me: str | None) -> list[graph.Relation]:
    """The valid edges the new triples might contradict, newest first, at most KNOWN_EDGES.

    Those touching an entity of the triples other than the scope's own (likes -> dislikes of
    the same thing), and the own entity's edges of the triples' relationships only (a new
    lives_in against the old one): the own entity touches every edge of the user, most of them
    beside the point.
    """
    project, scope = job.claim.project_id, graph.Scope.of(job.scope)
    mine = graph.normalise_name(me) if me else None
    others = {graph.normalise_name(n) for t in triples for n in (t.source, t.destination)} - {mine}
    found = {r.id: r for r in graph.relations_touching(project, scope, others, limit=KNOWN_EDGES)}
    if mine is not None:
        for relationship in sorted({t.relationship for t in triples}):
            for relation in graph.relations_touching(
                project, scope, [mine], relationship=relationship, limit=KNOWN_EDGES
            ):
                found.setdefault(relation.id, relation)
    return sorted(found.values(), key=lambda r: r.id, reverse=True)[:KNOWN_EDGES]


def _mentions(name: str, text: str, me: str | None) -> bool:
    if me is not None and name == me and SELF_MENTION.search(text):
        return True
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE) is not None


def record_graph(
    event: MemoryEvent,
    scope: dict[str, Any],
    plan: GraphPlan,
    stored: dict[int, uuid.UUID],
    facts: Sequence[Fact],
) -> dict[str, Any]:
    """Apply the graph plan through the actions (in the caller's transaction); what the event
    records of it: status, entities, relations added (or merged) and invalidated."""
    summary: dict[str, Any] = {"status": plan.status}
    if plan.status != "SUCCEEDED":
        return summary
    me = self_name(scope)
    types = {graph.normalise_name(e.name): e.type for e in plan.entities}
    assertions = [
        GraphAssertion(
            t.source,
            t.relationship,
            t.destination,
            stored[t.fact],
            types.get(graph.normalise_name(t.source), ""),
            types.get(graph.normalise_name(t.destination), ""),
        )
        for t in plan.triples
        if t.fact in stored  # its fact became a memory (not refused as immutable)
    ]
    mentions = {
        memory_id: [(e.name, e.type) for e in plan.entities if _mentions(e.name, facts[i].text, me)]
        for i, memory_id in stored.items()
    }
    outcome = actions.do_record_graph(
        event.project_id,
        scope,
        assertions=assertions,
        contradicted=plan.contradicted,
        mentions=mentions,
        event_id=event.id,
    )
    summary["entities"] = [{"name": e.name, "type": e.type} for e in plan.entities]
    summary["added"] = [r.reference() for r in outcome.added]
    summary["invalidated"] = [r.reference() for r in outcome.invalidated]
    return summary
