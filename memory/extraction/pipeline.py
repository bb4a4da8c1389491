"""Extraction and consolidation of one add request (a MemoryEvent).

Extract, retrieve, decide, then the graph (entities, relations, contradictions over the facts
that become new memories), apply.

`attempt` is what a worker runs, once per delivery of the event's message:

- `claim` takes the event in a transaction of its own, committed before any other work
  (status RUNNING, attempts + 1, a lease, a fresh claim token), so every attempt counts, however
  it ends. An event whose attempts are used up is FAILED there instead of run again.
- `run` does the work, renewing the lease before each step (each model call, the retrieval,
  applying), so the lease bounds one step rather than the whole job.
- Every failure is recorded by `release`: one that can never succeed (`PERMANENT`: a malformed
  payload, a value out of range, a bug) fails the event at once; any other one puts it back to
  PENDING for a retry with backoff, until ENGRAM_EVENT_MAX_ATTEMPTS, then FAILED.
- Renewing, applying, releasing and failing happen only under the worker's own claim token: a
  worker whose lease ran out and whose event was claimed since (`LostClaimError`) drops it
  without writing anything, and asks for no retry.

It is safe to run twice: decisions are applied in the transaction that marks it SUCCEEDED.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DataError
from django.db.models import Q, QuerySet, Value
from django.utils import timezone
from pgvector.django import CosineDistance

from memory import actions, graph
from memory.actions import Actor, GraphAssertion, NewMemory
from memory.extraction.documents import read_documents
from memory.extraction.llm import (
    EXCLUSIVE,
    Context,
    Decision,
    EntityRef,
    Existing,
    Extractor,
    Fact,
    KnownEdge,
    ModelOutputError,
    Triple,
    Turn,
    Usage,
    only_states,
    requested_wait,
)
from memory.models import SCOPE_FIELDS, Memory, MemoryEvent, ScopeSummary, content_hash
from memory.parts import describe, parse_part
from memory.queries import scope_lookup, scope_memories
from memory.text.embeddings import Vectors, embed
from tenants.db import project_context

logger = logging.getLogger(__name__)

NEIGHBOURS = 5  # existing memories shown to the model per candidate fact
KNOWN_EDGES = 50  # existing relations shown to the model when checking contradictions
RECENT_TURNS = 10
# The longest wait between two attempts at an event. With ENGRAM_EVENT_MAX_ATTEMPTS attempts
# the waits (ENGRAM_EVENT_BACKOFF_MS x 2^attempts) add up to minutes, so an outage of the model
# API (429s, 5xx, timeouts) is waited out rather than failing the events queued meanwhile.
MAX_BACKOFF_MS = 300_000

# Failures that a retry cannot cure: the same payload through the same code raises them again
# (a malformed payload, a timestamp or date out of range, a value the database refuses, a bug).
# The event fails at once instead of spending its attempts. Anything else (model rate limits,
# 5xx and timeouts, OperationalError, StaleDecisionError, ...) is retried with backoff.
PERMANENT: tuple[type[Exception], ...] = (
    ValueError,  # also UnicodeError, and pydantic's and JSON's decoding errors
    LookupError,  # KeyError, IndexError
    TypeError,
    AttributeError,
    ArithmeticError,  # OverflowError, ZeroDivisionError
    DataError,
    ValidationError,
)


class StaleDecisionError(RuntimeError):
    """A decision names a memory that a concurrent event has since superseded or deleted.

    Nothing of the event is applied (the transaction rolls back); the worker retries it, and
    the retry decides against the memories as they are now, so no update is lost.
    """


class LostClaimError(RuntimeError):
    """The event is no longer RUNNING under this worker's claim.

    Its lease ran out and another worker claimed it, or it was finished meanwhile: the worker
    drops it without writing to it.
    """


@dataclass(frozen=True)
class Claim:
    event_id: uuid.UUID
    project_id: uuid.UUID
    token: uuid.UUID


@dataclass
class Run:
    claim: Claim
    scope: dict[str, Any]
    started: float
    usage: Usage
    extractor: str = ""


@dataclass(frozen=True)
class Prepared:
    facts: list[Fact]
    vectors: Vectors
    duplicates: dict[int, Memory]  # fact index -> active memory with the same text
    neighbours: list[list[Existing]]


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


@dataclass
class Ended:
    relationships: set[str] = field(default_factory=set)
    memory_ids: set[str] = field(default_factory=set)


def attempt(event_id: uuid.UUID, project_id: uuid.UUID, extractor: Extractor) -> int | None:
    """Run one attempt at the event; return the delay (ms) before the next one, or None."""
    claimed = claim(event_id, project_id)
    if claimed is None:
        return None  # finished, failed for good, or another worker holds it
    try:
        run(claimed, extractor)
    except LostClaimError:
        logger.warning("event %s: claimed by another worker meanwhile, dropped", event_id)
        return None
    # Every failure, of whatever kind, must end as a recorded attempt: none may escape to leave
    # the event RUNNING until its lease runs out.
    except Exception as exc:
        released = release(claimed, exc)
        if released is None:
            logger.warning("event %s failed after another worker claimed it", event_id)
            return None
        if released.status != MemoryEvent.Status.PENDING:
            logger.exception("event %s failed for good (attempt %s)", event_id, released.attempts)
            return None
        logger.warning("event %s failed (attempt %s), retrying", event_id, released.attempts)
        return backoff(released.attempts, requested_wait(exc))
    return None


def backoff(attempts: int, asked: float | None = None) -> int:
    """Milliseconds before the next attempt: ENGRAM_EVENT_BACKOFF_MS x 2^attempts, no sooner
    than the model API `asked` (its Retry-After, in seconds), at most MAX_BACKOFF_MS."""
    wait = float(settings.ENGRAM_EVENT_BACKOFF_MS * 2**attempts)
    if asked is not None:
        wait = max(wait, asked * 1000)
    return int(min(MAX_BACKOFF_MS, wait))


def process_event(event_id: uuid.UUID, project_id: uuid.UUID, extractor: Extractor) -> None:
    """Claim the event and run it; failures go through (a worker's `attempt` records them)."""
    claimed = claim(event_id, project_id)
    if claimed is not None:
        run(claimed, extractor)


def claim(event_id: uuid.UUID, project_id: uuid.UUID) -> Claim | None:
    """Take the event if it is pending, or running under an expired lease (its worker died).

    Committed on its own (a worker calls it outside any transaction), before any other work,
    so that the attempt counts whatever happens next. An event whose attempts are used up is
    FAILED instead.
    """
    now = timezone.now()
    claimable = Q(status=MemoryEvent.Status.PENDING) | Q(
        status=MemoryEvent.Status.RUNNING, lease_until__lt=now
    )
    with project_context(project_id):
        # Two workers racing: the second waits for the first's lock, then no longer matches.
        event = MemoryEvent.objects.select_for_update().filter(claimable, pk=event_id).first()
        if event is None:
            return None
        if event.attempts >= settings.ENGRAM_EVENT_MAX_ATTEMPTS:
            # Its last worker died (or hit the time limit) before it could record a failure.
            died = f"the worker stopped without finishing (lease expired), attempt {event.attempts}"
            _finish(
                event,
                MemoryEvent.Status.FAILED,
                f"{died}; before: {event.error}" if event.error else died,
            )
            return None
        event.status, event.attempts, event.claim_id = (
            MemoryEvent.Status.RUNNING, event.attempts + 1, uuid.uuid4()
        )  # fmt: skip
        event.lease_until, event.started_at = now + _lease(), now
        event.save(update_fields=["status", "attempts", "claim_id", "lease_until", "started_at"])
    return Claim(event_id, project_id, event.claim_id)


def _lease() -> timedelta:
    return timedelta(seconds=settings.ENGRAM_EVENT_LEASE_SECONDS)


def _held(claimed: Claim) -> QuerySet[MemoryEvent]:
    """The event, if it is still RUNNING under this claim (zero or one row)."""
    return MemoryEvent.objects.filter(
        pk=claimed.event_id, status=MemoryEvent.Status.RUNNING, claim_id=claimed.token
    )


def renew(claimed: Claim) -> None:
    """Extend the lease of a claim still held (before each step); else raise LostClaimError."""
    with project_context(claimed.project_id):
        held = _held(claimed).update(lease_until=timezone.now() + _lease())
    if not held:
        raise LostClaimError(f"event {claimed.event_id} is no longer held by this claim")


def run(claimed: Claim, extractor: Extractor) -> None:
    """Extract, retrieve, decide and apply, renewing the lease before each step."""
    started = time.perf_counter()
    with project_context(claimed.project_id):
        event = MemoryEvent.objects.get(pk=claimed.event_id)
        scope = {f: event.payload["scope"].get(f) for f in SCOPE_FIELDS}
        context = build_context(event, scope)
    # Text documents are fetched (or decoded) here, outside any transaction.
    context = read_documents(context, lambda: renew(claimed))
    job = Run(claimed, scope, started, Usage(), extractor.name)
    notes = skipped_parts(context, extractor)
    if event.payload.get("memory_type") == "procedural_memory":
        store_procedure(event, job, context, extractor, notes)
        return
    try:
        renew(claimed)
        facts, usage = extractor.extract(context)
        job.usage.add(usage)
        facts, dropped = capped(facts)
        notes += dropped
        facts, dropped = checked_categories(facts, context.categories)
        notes += dropped
        renew(claimed)
        prepared = prepare(claimed.project_id, scope, facts)
        open_facts = [i for i in range(len(facts)) if i not in prepared.duplicates]
        # A fact with no existing memory near it in meaning is new: ADD without asking.
        asked = [i for i in open_facts if prepared.neighbours[i]]
        decided: list[Decision] = []
        if asked:
            renew(claimed)
            decisions, usage = extractor.decide(
                [facts[i] for i in asked],
                [prepared.neighbours[i] for i in asked],
                context.observed_on,
            )
            job.usage.add(usage)
            notes += decisions.rejected
            decided = [
                Decision(d.event, asked[d.fact], d.memory_id, d.text) for d in decisions.decisions
            ]
    except ModelOutputError as exc:
        job.usage.add(exc.usage)
        mark_failed(claimed, str(exc), job.usage)
        return
    chosen, settled = settle(decided, facts, open_facts, asked)
    plan = plan_graph(job, facts, chosen, extractor)
    chosen = superseding(claimed.project_id, scope, chosen, plan)
    renew(claimed)
    apply(job, prepared, chosen, notes + settled, plan=plan)


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


# Mem0's default memory categories, used when neither the request nor the project sets some.
DEFAULT_CATEGORIES = (
    "personal_details", "family", "professional_details", "sports", "travel", "food", "music",
    "health", "technology", "hobbies", "fashion", "entertainment", "milestones",
    "user_preferences", "misc",
)  # fmt: skip


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


def skipped_parts(context: Context, extractor: Extractor) -> list[str]:
    """The event's notes on the images and PDFs an extractor without a model cannot read."""
    if extractor.reads_attachments:
        return []
    return [
        f"message {turn.position}: {turn.part.type} skipped, the {extractor.name} extractor "
        "reads text only (images and PDFs need ANTHROPIC_API_KEY)"
        for turn in context.new_messages
        if turn.part is not None
    ]


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
                contradictions.edge_ids, plan.rejected + contradictions.rejected
            )  # fmt: skip
            plan.ended = ended_by(plan.triples, [r for r in known if r.id in plan.contradicted])
    except ModelOutputError as exc:
        return GraphPlan("FAILED", rejected=[f"graph: {exc}"])
    return plan


def ended_by(triples: Sequence[Triple], edges: Sequence[graph.Relation]) -> dict[int, Ended]:
    """For each fact, the contradicted edges of an exclusive relationship (a home, employer,
    job or spouse) its triples give another value to."""
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
    near ("I live in Austin." and "I moved to Porto.": 0.27, under
    ENGRAM_DECIDE_SIMILARITY_FLOOR), so without a model both stayed active; the graph's
    contradiction step knows the old edge and the memories behind it. A memory that says more
    than the ended relationship (llm.only_states) is left as it is; its edge still ends.
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


def store_procedure(
    event: MemoryEvent, job: Run, context: Context, extractor: Extractor, notes: list[str]
) -> None:
    """Procedural memory: one summary of the agent's steps, stored as one memory (as Mem0)."""
    try:
        renew(job.claim)
        summary, usage = extractor.procedure(context)
        job.usage.add(usage)
    except ModelOutputError as exc:
        job.usage.add(exc.usage)
        mark_failed(job.claim, str(exc), job.usage)
        return
    fact = Fact(summary, None, 1.0, tuple(t.position for t in context.new_messages))
    decision = Decision("ADD", 0, None, summary)
    metadata = {**(event.payload.get("metadata") or {}), "memory_type": "procedural_memory"}
    prepared = Prepared([fact], embed([summary]), {}, [[]])
    renew(job.claim)
    apply(job, prepared, [decision], notes, metadata=metadata)


def message_turn(position: int, message: dict[str, Any], *, with_part: bool = True) -> Turn:
    """A payload message as the extractor sees it: its text, or for a multimodal part its
    placeholder and, `with_part`, the part itself (checked again: the payload is input)."""
    content, name = message["content"], message.get("name") or ""
    if isinstance(content, str):
        return Turn(position, message["role"], content, name=name)
    if not with_part:
        return Turn(position, message["role"], describe(content), name=name)
    part = parse_part(content)
    return Turn(position, message["role"], part.placeholder(), part, name=name)


def build_context(event: MemoryEvent, scope: dict[str, Any]) -> Context:
    """The new messages (with their parts), and as text only: the scope's last messages, its
    running summary, the observation date and the request's instructions."""
    payload = event.payload
    new = [message_turn(i, m) for i, m in enumerate(payload["messages"])]
    earlier = MemoryEvent.objects.filter(
        status=MemoryEvent.Status.SUCCEEDED, created_at__lt=event.created_at, **scope_lookup(scope)
    ).order_by("-created_at")[:3]
    recent: list[Turn] = []
    for previous in earlier:
        recent = [
            shortened(message_turn(-1, m, with_part=False)) for m in previous.payload["messages"]
        ] + recent
    zone = payload.get("timezone") or ""
    observed_on = observed_at(event).astimezone(ZoneInfo(zone or "UTC")).date()
    summary = ScopeSummary.objects.filter(
        project_id=event.project_id, **scope_lookup(scope)
    ).first()
    return Context(
        new_messages=new,
        observed_on=observed_on,
        summary=summary.text if summary else "",
        recent_messages=recent[-RECENT_TURNS:],
        custom_instructions=payload.get("custom_instructions") or "",
        categories=payload.get("custom_categories") or DEFAULT_CATEGORIES,
        includes=payload.get("includes") or "",
        excludes=payload.get("excludes") or "",
        about_agent=bool(scope.get("agent_id")) and not scope.get("user_id"),
        timezone=zone,
    )


# Earlier messages are context only: each is cut to this many characters.
RECENT_CHARACTERS = 600
# A summary refresh folds in at most this many requests (the most recent ones).
SUMMARY_EVENTS_AT_MOST = 20


def shortened(turn: Turn) -> Turn:
    if len(turn.content) <= RECENT_CHARACTERS:
        return turn
    return replace(turn, content=turn.content[:RECENT_CHARACTERS] + " […]")


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
            # Only memories near in meaning are shown: below the floor nothing can be the same
            # fact or contradict it (measured with the embedder: unrelated facts 0.23-0.29,
            # a change of employer 0.35, of home 0.76).
            neighbours.append([
                Existing(pk, text, 1 - distance, when.date())
                for pk, text, distance, when in nearest
                if 1 - distance >= settings.ENGRAM_DECIDE_SIMILARITY_FLOOR
            ])  # fmt: skip
    return Prepared(list(facts), vectors, duplicates, neighbours)


def apply(
    run: Run,
    prepared: Prepared,
    decisions: Sequence[Decision],
    rejected: list[str],
    *,
    metadata: dict[str, Any] | None = None,
    plan: GraphPlan | None = None,
) -> None:
    """Apply every decision and the graph plan, and finish the event, in one transaction, or
    nothing at all."""
    # Most decisions keep the candidate's text, whose vector is known; embed only new wording.
    vectors: dict[str, Any] = dict(
        zip((f.text for f in prepared.facts), prepared.vectors, strict=True)
    )
    texts = [d.text for d in decisions if d.event in ("ADD", "UPDATE") and d.text not in vectors]
    if texts:
        vectors.update(zip(texts, embed(texts), strict=True))
    claimed = run.claim
    with project_context(claimed.project_id):
        # Before reading the event: an erasure of the user in progress finishes first (and
        # deletes the event, so nothing is applied), or waits for this to commit and erases it.
        actions.hold_user(claimed.project_id, run.scope.get("user_id"))
        # Another event of the scope applying at the same time finishes first: an ADD below
        # then sees what it stored (_apply_one), and does not store the same text twice.
        actions.hold_scope(claimed.project_id, run.scope)
        event = _held(claimed).select_for_update().first()
        if event is None:
            raise LostClaimError(f"event {claimed.event_id} is no longer held by this claim")
        results = [
            {"id": str(m.id), "memory": m.text, "event": "NONE"}
            for m in prepared.duplicates.values()
        ]
        # Only memories still active: a concurrent event may have superseded one meanwhile (the
        # lock waits for it, then the state is checked again); see StaleDecisionError.
        targets = {
            m.pk: m
            for m in Memory.objects.light()
            .active()
            .select_for_update()
            .filter(pk__in=[d.memory_id for d in decisions if d.memory_id])
        }
        stored: dict[int, uuid.UUID] = {}  # fact index -> the memory it became
        for decision in decisions:
            outcome, note = _apply_one(
                event, decision, fact=prepared.facts[decision.fact], scope=run.scope,
                targets=targets, vectors=vectors,
                metadata=event.payload.get("metadata") or {} if metadata is None else metadata,
            )  # fmt: skip
            if note:
                rejected.append(note)
            if outcome is not None:
                results.append(outcome)
                if outcome["event"] in ("ADD", "UPDATE"):
                    stored[decision.fact] = uuid.UUID(outcome["id"])
        plan = plan or GraphPlan()
        rejected += plan.rejected
        event.graph = record_graph(event, run.scope, plan, stored, prepared.facts)
        event.status = MemoryEvent.Status.SUCCEEDED
        event.results = results
        event.extractor = run.extractor
        event.usage = run.usage.counts()
        event.error = "; ".join(rejected + run.usage.notes)
        event.completed_at = timezone.now()
        event.lease_until = None
        event.timings = {"total_ms": round((time.perf_counter() - run.started) * 1000, 1)}
        event.save()
        # The running summary is refreshed off the extraction path, once this has committed.
        actions.schedule_summary_refresh(event)


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
    summary["added"] = [_relation(r) for r in outcome.added]
    summary["invalidated"] = [_relation(r) for r in outcome.invalidated]
    return summary


def _relation(relation: graph.Relation) -> dict[str, Any]:
    return {
        "id": relation.id,
        "source": relation.source,
        "relationship": relation.relationship,
        "destination": relation.destination,
    }


def observed_at(event: MemoryEvent) -> datetime:
    """When the event's messages were said: the request's observation date or time, else its
    `timestamp`, else when it came."""
    observed, timestamp = event.payload.get("observed_at"), event.payload.get("timestamp")
    if observed:
        return datetime.fromisoformat(observed)
    return datetime.fromtimestamp(timestamp, tz=UTC) if timestamp else event.created_at


def _apply_one(  # noqa: PLR0911 - one return per outcome reads best
    event: MemoryEvent,
    decision: Decision,
    *,
    fact: Fact,
    scope: dict[str, Any],
    targets: dict[uuid.UUID, Memory],
    vectors: dict[str, Any],
    metadata: dict[str, Any],
) -> tuple[dict[str, Any] | None, str | None]:
    """Apply one decision through the actions: (its result, None for NONE; a note on what was
    refused or changed, or None)."""
    actor = Actor.extraction(event.id)
    target = targets.get(decision.memory_id) if decision.memory_id else None
    if decision.event != "ADD" and target is None:
        # Another event changed it since this one decided: decide again on the current state.
        raise StaleDecisionError(f"{decision.event} of {decision.memory_id}, changed meanwhile")
    if decision.event == "NONE":
        return None, None
    moment = observed_at(event)
    if target is not None and target.created_at > moment:
        # A late retry of an older request must not overwrite what a newer one stated.
        seen = f"observed {target.created_at.date()}, after this request ({moment.date()})"
        return None, f"{decision.event} of {target.id} refused: it was {seen}"
    new = NewMemory(
        text=decision.text,
        vector=vectors.get(decision.text, ()),
        scope=scope,
        metadata=metadata,
        categories=[fact.category] if fact.category else [],
        expiration_date=event.payload.get("expiration_date"),
        immutable=bool(event.payload.get("immutable")),
        source_event_id=event.id,
        source_positions=fact.positions,
        created_at=moment,
    )
    if decision.event == "DELETE":
        assert target is not None  # noqa: S101 - checked above
        try:
            actions.do_delete_memory(target, actor=actor)
        except actions.ImmutableMemoryError:
            return None, f"DELETE of immutable memory {target.id} refused"
        return {"id": str(target.id), "memory": target.text, "event": "DELETE"}, None
    if decision.event == "UPDATE":
        assert target is not None  # noqa: S101 - checked above
        # The replacement keeps what the old memory carried, unless this request says otherwise.
        carried = replace(
            new,
            metadata={**target.metadata, **metadata},
            categories=list(dict.fromkeys([*target.categories, *new.categories])),
            expiration_date=new.expiration_date or target.expiration_date,
        )
        try:
            memory = actions.do_supersede_memory(target, carried, actor=actor)
        except actions.ImmutableMemoryError:
            memory = actions.do_create_memory(event.project_id, new, actor=actor)
            return {"id": str(memory.id), "memory": memory.text, "event": "ADD"}, (
                f"UPDATE of immutable memory {target.id} refused: added instead"
            )
        return {"id": str(memory.id), "memory": memory.text, "event": "UPDATE",
                "previous_memory": target.text, "replaces": str(target.id)}, None  # fmt: skip
    # prepare() found the exact duplicates stored before this event began; another event of
    # the scope may have stored the same text since, and this one (under hold_scope) sees it.
    same = scope_memories(event.project_id, scope).light().filter(hash=content_hash(new.text))
    if (stored := same.first()) is not None:
        return {"id": str(stored.id), "memory": stored.text, "event": "NONE"}, None
    memory = actions.do_create_memory(event.project_id, new, actor=actor)
    return {"id": str(memory.id), "memory": memory.text, "event": "ADD"}, None


def mark_failed(claimed: Claim, error: str, usage: Usage | None = None) -> bool:
    """FAILED for good, if the event is still held by this claim (else False, nothing written),
    with what the model calls cost."""
    with project_context(claimed.project_id):
        event = _held(claimed).select_for_update().first()
        if event is None:
            return False
        if usage is not None:
            event.usage = usage.counts()
            event.save(update_fields=["usage"])
        _finish(event, MemoryEvent.Status.FAILED, error)
        return True


def release(claimed: Claim, failure: Exception) -> MemoryEvent | None:
    """Record a failed attempt: back to PENDING for a retry, or FAILED for good.

    FAILED at once when the failure is PERMANENT, or after ENGRAM_EVENT_MAX_ATTEMPTS. Returns the
    event, or None (nothing written) when the event is no longer held by this claim.
    """
    with project_context(claimed.project_id):
        event = _held(claimed).select_for_update().first()
        if event is None:
            return None
        final = isinstance(failure, PERMANENT) or (
            event.attempts >= settings.ENGRAM_EVENT_MAX_ATTEMPTS
        )
        status = MemoryEvent.Status.FAILED if final else MemoryEvent.Status.PENDING
        _finish(event, status, repr(failure))
        return event


def _finish(event: MemoryEvent, status: str, error: str) -> None:
    """End the current claim: PENDING again, or FAILED (in the caller's transaction)."""
    event.status, event.error = status, error[:5000]
    event.lease_until, event.claim_id = None, None
    if status == MemoryEvent.Status.FAILED:
        event.completed_at = timezone.now()
    event.save(update_fields=["status", "error", "lease_until", "claim_id", "completed_at"])


def refresh_summary(event_id: uuid.UUID, project_id: uuid.UUID, extractor: Extractor) -> None:
    """Fold the scope's processed requests into its running summary, once every
    ENGRAM_SUMMARY_EVERY of them: the requests finished since the summary was last written, up
    to and including this one, when there are that many (else nothing, no model call). What the
    call cost is added to this event's usage."""
    with project_context(project_id):
        event = MemoryEvent.objects.get(pk=event_id)
        if event.completed_at is None:  # not processed (yet): nothing to fold in
            return
        scope = {f: event.payload["scope"].get(f) for f in SCOPE_FIELDS}
        current = ScopeSummary.objects.filter(project_id=project_id, **scope_lookup(scope)).first()
        pending = MemoryEvent.objects.filter(
            status=MemoryEvent.Status.SUCCEEDED,
            completed_at__lte=event.completed_at,
            **scope_lookup(scope),
        )
        if current is not None:
            pending = pending.filter(completed_at__gt=current.updated_at)
        events = list(pending.order_by("-completed_at")[:SUMMARY_EVENTS_AT_MOST])[::-1]
    if len(events) < settings.ENGRAM_SUMMARY_EVERY:
        return
    turns = [
        shortened(message_turn(i, m, with_part=False))
        for folded in events
        for i, m in enumerate(folded.payload["messages"])
    ]
    text, usage = extractor.summarize(current.text if current else "", turns)
    with project_context(project_id):
        if usage.calls:
            totals = Usage.from_counts(event.usage or {})
            totals.add(usage)
            MemoryEvent.objects.filter(pk=event.pk).update(usage=totals.counts())
        if text is None:
            return
        # Written as of the last request folded in (update() keeps that time: no auto_now).
        summary, _ = ScopeSummary.objects.update_or_create(
            project_id=project_id, **scope, defaults={"text": text}
        )
        ScopeSummary.objects.filter(pk=summary.pk).update(updated_at=event.completed_at)
