"""Extraction and consolidation of one add request (a MemoryEvent): the jobs a worker runs.

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
`refresh_summary` is the other job: folding processed requests into the scope's summary.

This module owns the order of the steps; each step is its own module:
- extraction.claims: the claim, its lease, and recording how an attempt ended;
- extraction.context: what the extractor is shown (extraction.documents reads text documents);
- extraction.decide: limits on the facts, their neighbours, settling the decisions;
- extraction.graph_step: entities, relations, contradictions, and the superseding they cause;
- extraction.apply: the decisions and the graph plan applied, in one transaction.
It exports the claim's functions and the failures a run raises (`__all__`) for callers that
drive an attempt step by step.

A user's event from which extraction found no fact at all is finished with a `warning`, so an
add that kept nothing is never silent: `NOTHING_EXTRACTED` when its user messages hold
first-person statements (a model that is not working; `states_first_person` reads them as the
offline extractor does), else `NOTHING_KEPT` (the offline extractor's says what it keeps).

May import those modules, llm.types, llm.waits (a failure's Retry-After) and llm.offline (what
a first-person statement is), memory.graph (entity names embedded before the transaction),
memory.models, memory.queries, memory.text and tenants; writes go through extraction.apply
(memory.actions).
"""

from __future__ import annotations

import logging
import time
import uuid

from django.conf import settings

from memory import graph
from memory.extraction.apply import StaleDecisionError, apply
from memory.extraction.claims import (
    Claim,
    LostClaimError,
    Run,
    claim,
    mark_failed,
    release,
    renew,
)
from memory.extraction.context import build_context, message_turn, shortened, skipped_parts
from memory.extraction.decide import Prepared, capped, checked_categories, prepare, settle
from memory.extraction.documents import read_documents
from memory.extraction.graph_step import plan_graph, superseding
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.llm.types import Context, Decision, Extractor, Fact, ModelOutputError, Usage
from memory.extraction.llm.waits import requested_wait
from memory.models import (
    NOTHING_EXTRACTED,
    NOTHING_KEPT,
    NOTHING_KEPT_OFFLINE,
    SCOPE_FIELDS,
    MemoryEvent,
    ScopeSummary,
)
from memory.queries import scope_lookup
from memory.text.embeddings import embed
from memory.text.recognise import mentions_self
from tenants.db import project_context

__all__ = [
    "MAX_BACKOFF_MS",
    "NOTHING_EXTRACTED",
    "NOTHING_KEPT",
    "NOTHING_KEPT_OFFLINE",
    "Claim",
    "LostClaimError",
    "StaleDecisionError",
    "attempt",
    "backoff",
    "claim",
    "mark_failed",
    "process_event",
    "refresh_summary",
    "release",
    "renew",
    "run",
    "store_procedure",
]

logger = logging.getLogger(__name__)


# The longest wait between two attempts at an event. With ENGRAM_EVENT_MAX_ATTEMPTS attempts
# the waits (ENGRAM_EVENT_BACKOFF_MS x 2^attempts) add up to minutes, so an outage of the model
# API (429s, 5xx, timeouts) is waited out rather than failing the events queued meanwhile.
MAX_BACKOFF_MS = 300_000


# A summary refresh folds in at most this many requests (the most recent ones).
SUMMARY_EVENTS_AT_MOST = 20


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
        warning = "" if facts else nothing_kept(context, extractor)
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
    # The entity names the graph may record, embedded before the transaction (a hosted
    # embedder is an HTTP call).
    vectors = graph.name_vectors(claimed.project_id, graph.Scope.of(scope), plan.names())
    renew(claimed)
    with graph.names_embedded(vectors):
        apply(job, prepared, chosen, notes + settled, plan=plan, warning=warning)


def nothing_kept(context: Context, extractor: Extractor) -> str:
    """The warning of a request from which extraction found no fact: NOTHING_EXTRACTED when the
    user's messages state something in the first person (a model that may not be working),
    else NOTHING_KEPT (the offline extractor's says what it keeps); none in an agent's own
    scope, whose adds are the agent's notes."""
    if context.about_agent:
        return ""
    if states_first_person(context):
        return NOTHING_EXTRACTED
    return NOTHING_KEPT_OFFLINE if extractor.name == OfflineExtractor.name else NOTHING_KEPT


def states_first_person(context: Context) -> bool:
    """Whether the user's new messages hold a first-person statement: a sentence the offline
    extractor keeps (not a question, a greeting or a filler such as "I see") that speaks in the
    first person singular ("I", "I'm", "my", "me"). An agent's scope extracts the agent's
    statements, not the user's: never there."""
    if context.about_agent:
        return False
    said = [t for t in context.new_messages if t.role == "user"]
    facts, _ = OfflineExtractor().extract(Context(said, context.observed_on))
    return any(mentions_self(f.text) for f in facts)


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
            MemoryEvent.objects.filter(pk=event.pk).update(usage=totals.recorded())
        if text is None:
            return
        # Written as of the last request folded in (update() keeps that time: no auto_now).
        summary, _ = ScopeSummary.objects.update_or_create(
            project_id=project_id, **scope, defaults={"text": text}
        )
        ScopeSummary.objects.filter(pk=summary.pk).update(updated_at=event.completed_at)
