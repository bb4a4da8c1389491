"""Add requests for extraction (MemoryEvent) and what extraction records of them: the event
queued for the worker, the graph it learned, the summary refresh it schedules.

May import memory.graph, memory.jobs, memory.models, tenants and Django.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memory import graph, jobs
from memory.models import DELETED_BEFORE_PROCESSING, SCOPE_FIELDS, MemoryEvent
from tenants.db import project_context
from tenants.models import Project


def do_queue_add(project: Project, payload: dict[str, Any]) -> MemoryEvent:
    """Record an add request for extraction, and send it to the workers once committed (no
    savepoint inside the caller's transaction: a failed add ends the request)."""
    with project_context(project.pk, savepoint=False):
        event = MemoryEvent.objects.create(project=project, payload=payload, **payload["scope"])
        args = (str(event.id), str(project.pk))
        # A lost send (the database gone right after the commit) is logged, not raised: the
        # event is stored PENDING and the sweeper (sweep_events) sends it again.
        transaction.on_commit(lambda: jobs.PROCESS_EVENT.send(*args), robust=True)
    return event


def do_cancel_queued_adds(project_id: uuid.UUID, ids: Mapping[str, str]) -> int:
    """The add requests not yet processed (PENDING, or RUNNING: the worker then finds its claim
    gone and applies nothing) whose memories a delete of these scope ids would delete (each
    named equal; "*": set to anything), ended as SUCCEEDED with nothing kept and the
    DELETED_BEFORE_PROCESSING warning: a delete covers the messages sent before it, even those
    the worker has not read yet. Call it in the delete's transaction, before the delete (a
    worker applying one of them holds its row: the delete then waits, and sees what it
    wrote). Returns how many."""
    named = {f: v for f, v in ids.items() if f in SCOPE_FIELDS and v}
    if not named:
        return 0
    match = Q()
    for name, value in named.items():
        match &= Q(**{f"{name}__isnull": False}) if value == "*" else Q(**{name: value})
    now = timezone.now()
    with project_context(project_id):
        return MemoryEvent.objects.filter(
            match,
            project_id=project_id,
            status__in=[MemoryEvent.Status.PENDING, MemoryEvent.Status.RUNNING],
            created_at__lte=now,
        ).update(
            status=MemoryEvent.Status.SUCCEEDED,
            results=[],
            warning=DELETED_BEFORE_PROCESSING,
            claim_id=None,
            completed_at=now,
        )


@dataclass(frozen=True)
class GraphAssertion:
    """One relation a memory states (extraction's triple, with the memory it became)."""

    source: str
    relationship: str
    destination: str
    memory_id: uuid.UUID
    source_type: str = ""
    destination_type: str = ""


@dataclass
class GraphOutcome:
    added: list[graph.Relation] = field(default_factory=list)  # new or merged edges
    invalidated: list[graph.Relation] = field(default_factory=list)


def do_record_graph(
    project_id: uuid.UUID,
    scope: Mapping[str, str | None],
    *,
    assertions: Sequence[GraphAssertion],
    contradicted: Sequence[int] = (),
    mentions: Mapping[uuid.UUID, Sequence[tuple[str, str]]] | None = None,
    event_id: uuid.UUID | None = None,
) -> GraphOutcome:
    """Write what extraction learned to the scope's graph, in one transaction (a savepoint of
    the pipeline's, so the graph commits with the memories or not at all).

    First the contradicted edges are invalidated (kept, valid=false, never erased); then each
    assertion is merged into the graph (a duplicate valid edge gains the memory id, otherwise
    a new edge), linking its memory to both ends; then each memory is linked to the other
    entities it mentions.
    """
    where = graph.Scope.of(scope)
    outcome = GraphOutcome()
    with project_context(project_id):
        graph.lock_entities(
            project_id,
            where,
            [name for fact in assertions for name in (fact.source, fact.destination)]
            + [name for entities in (mentions or {}).values() for name, _ in entities],
        )
        if contradicted:
            outcome.invalidated = graph.invalidate_relations(project_id, where, ids=contradicted)
        for fact in assertions:
            relation = graph.upsert_relation(
                project_id,
                fact.source,
                fact.relationship,
                fact.destination,
                where,
                memory_id=fact.memory_id,
                event_id=event_id,
                source_type=fact.source_type,
                destination_type=fact.destination_type,
            )
            outcome.added.append(relation)
        for memory_id, entities in (mentions or {}).items():
            if entities:
                graph.link_memory(project_id, memory_id, entities)
    return outcome


def schedule_summary_refresh(event: MemoryEvent) -> None:
    """Fold the event's messages into its scope's running summary, once this transaction has
    committed (off the extraction path; memory.extraction.tasks.refresh_summary)."""
    args = (str(event.id), str(event.project_id))
    # A lost send skips one refresh: the next one folds this event in (it reads every event
    # completed since the summary's last).
    transaction.on_commit(lambda: jobs.REFRESH_SUMMARY.send(*args), robust=True)
