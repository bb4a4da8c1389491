"""Applying an event: its decisions and graph plan, and finishing it, in one transaction.

`apply` holds the user (an erasure in progress goes first) and the scope (another event of it
applying goes first), takes the event under this worker's claim, applies each decision through
memory.actions (`_apply_one`), records the graph plan and marks the event SUCCEEDED, or does
nothing at all. A decision naming a memory changed since it was taken raises
StaleDecisionError: the event is retried and decides again.

May import memory.actions, memory.models, memory.queries, memory.text, tenants, llm.types and
extraction.claims, .context, .decide and .graph_step.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from django.utils import timezone

from config import metrics
from memory import actions
from memory.actions import Actor, NewMemory
from memory.extraction.claims import LostClaimError, Run, held_by
from memory.extraction.context import observed_at
from memory.extraction.decide import Prepared
from memory.extraction.graph_step import GraphPlan, record_graph
from memory.extraction.llm.types import Decision, Fact
from memory.models import Memory, MemoryEvent, content_hash
from memory.queries import scope_memories
from memory.text.embeddings import embed
from tenants.db import project_context


class StaleDecisionError(RuntimeError):
    """A decision names a memory that a concurrent event has since superseded or deleted.

    Nothing of the event is applied (the transaction rolls back); the worker retries it, and
    the retry decides against the memories as they are now, so no update is lost.
    """


def apply(
    run: Run,
    prepared: Prepared,
    decisions: Sequence[Decision],
    rejected: list[str],
    *,
    metadata: dict[str, Any] | None = None,
    plan: GraphPlan | None = None,
    warning: str = "",
) -> None:
    """Apply every decision and the graph plan, and finish the event (with its `warning`, if
    any), in one transaction, or nothing at all."""
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
        event = held_by(claimed).select_for_update().first()
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
                event,
                decision,
                fact=prepared.facts[decision.fact],
                scope=run.scope,
                targets=targets,
                vectors=vectors,
                metadata=event.payload.get("metadata") or {} if metadata is None else metadata,
            )
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
        metrics.count_event("succeeded", event.attempts)
        event.results = results
        event.extractor = run.extractor
        event.usage = run.usage.recorded()
        event.error = "; ".join(rejected + run.usage.notes)
        event.warning = warning
        event.completed_at = timezone.now()
        event.lease_until = None
        event.timings = {"total_ms": round((time.perf_counter() - run.started) * 1000, 1)}
        event.save()
        # The running summary is refreshed off the extraction path, once this has committed.
        actions.schedule_summary_refresh(event)


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
        return {
            "id": str(memory.id),
            "memory": memory.text,
            "event": "UPDATE",
            "previous_memory": target.text,
            "replaces": str(target.id),
        }, None
    # prepare() found the exact duplicates stored before this event began; another event of
    # the scope may have stored the same text since, and this one (under hold_scope) sees it.
    same = scope_memories(event.project_id, scope).light().filter(hash=content_hash(new.text))
    if (stored := same.first()) is not None:
        return {"id": str(stored.id), "memory": stored.text, "event": "NONE"}, None
    memory = actions.do_create_memory(event.project_id, new, actor=actor)
    return {"id": str(memory.id), "memory": memory.text, "event": "ADD"}, None
