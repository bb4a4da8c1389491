"""Every multi-row write to memories: one transaction each, with its history rows."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from memory.extraction.broker import SCHEMA
from memory.models import (
    SCOPE_FIELDS,
    Feedback,
    Memory,
    MemoryEvent,
    MemoryExport,
    MemoryHistory,
    MemoryQuerySet,
)
from memory.retrieval.embeddings import embed
from tenants.db import project_context
from tenants.models import Project

UNSET: Any = object()  # "not given", as opposed to an explicit null


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def structured_attributes(moment: datetime) -> dict[str, Any]:
    utc = moment.astimezone(UTC)
    iso = utc.isocalendar()
    return {
        "day": utc.day,
        "month": utc.month,
        "year": utc.year,
        "hour": utc.hour,
        "minute": utc.minute,
        "day_of_week": utc.strftime("%A").lower(),
        "is_weekend": utc.weekday() >= 5,
        "quarter": (utc.month - 1) // 3 + 1,
        "week_of_year": iso.week,
    }


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    name: str = ""


@dataclass
class AddOutcome:
    event_id: uuid.UUID
    # (memory, "ADD") for new memories, (memory, "NONE") for exact duplicates already stored.
    results: list[tuple[Memory, str]] = field(default_factory=list)


def _history(
    memory: Memory, event: str, *, old: str | None, actor: str, **extra: Any
) -> MemoryHistory:
    return MemoryHistory(
        project_id=memory.project_id,
        memory_id=memory.id,
        event=event,
        old_memory=old,
        new_memory=memory.text if event != MemoryHistory.Event.DELETE else None,
        actor=actor,
        metadata=memory.metadata,
        categories=list(memory.categories),
        **{f: getattr(memory, f) for f in SCOPE_FIELDS},
        **extra,
    )


def do_add_messages(
    project: Project,
    *,
    messages: Sequence[Message],
    scope: dict[str, str | None],
    actor: str,
    metadata: dict[str, Any] | None = None,
    created_at: datetime | None = None,
    expiration_date: date | None = None,
    immutable: bool = False,
) -> AddOutcome:
    """Store each non-system message verbatim as a memory (`infer=false`).

    A message whose exact text is already an active memory of the same scope is not stored
    again; the existing memory is returned with the event NONE.
    """
    outcome = AddOutcome(event_id=uuid.uuid4())
    turns = [(pos, m) for pos, m in enumerate(messages) if m.role != "system"]
    # Embedding is the slow part: do it before the transaction, once per distinct text.
    texts = list(dict.fromkeys(m.content for _, m in turns))
    vectors = dict(zip(texts, embed(texts), strict=True)) if texts else {}
    moment = created_at or timezone.now()
    with transaction.atomic():
        existing = _existing_by_hash(project, scope, [content_hash(t) for t in texts])
        new: list[Memory] = []
        for index, (position, message) in enumerate(turns):
            digest = content_hash(message.content)
            if digest in existing:
                outcome.results.append((existing[digest], "NONE"))
                continue
            memory = Memory(
                project=project,
                text=message.content,
                hash=digest,
                embedding=vectors[message.content],
                context_before=turns[index - 1][1].content if index > 0 else "",
                context_after=turns[index + 1][1].content if index + 1 < len(turns) else "",
                metadata=metadata or {},
                role=message.role,
                actor_id=message.name,
                created_at=moment,
                updated_at=moment,
                expiration_date=expiration_date,
                structured_attributes=structured_attributes(moment),
                immutable=immutable,
                source_event_id=outcome.event_id,
                source_positions=[position],
                **scope,
            )
            existing[digest] = memory
            new.append(memory)
            outcome.results.append((memory, "ADD"))
        Memory.objects.bulk_create(new)
        MemoryHistory.objects.bulk_create(
            _history(
                m,
                MemoryHistory.Event.ADD,
                old=None,
                actor=actor,
                event_id=outcome.event_id,
                input=[{"role": m.role, "content": m.text}],
            )
            for m in new
        )
    return outcome


def _existing_by_hash(
    project: Project, scope: dict[str, str | None], hashes: list[str]
) -> dict[str, Memory]:
    same_scope = {f: scope.get(f) for f in SCOPE_FIELDS}
    rows = (
        Memory.objects.for_project(project)
        .active()
        .filter(
            hash__in=hashes, **{f"{f}__isnull": True for f, v in same_scope.items() if v is None}
        )
        .filter(**{f: v for f, v in same_scope.items() if v is not None})
    )
    return {m.hash: m for m in rows}


@transaction.atomic
def do_update_memory(
    memory: Memory,
    *,
    actor: str,
    text: str | None = None,
    metadata: dict[str, Any] | None = None,
    expiration_date: date | None = UNSET,
    created_at: datetime | None = None,
) -> Memory:
    """Change a memory in place (re-embedding new text) and record the change."""
    old_text = memory.text
    if text is not None and text != memory.text:
        memory.text = text
        memory.hash = content_hash(text)
        memory.embedding = embed([text])[0]
    if metadata is not None:
        memory.metadata = metadata
    if expiration_date is not UNSET:
        memory.expiration_date = expiration_date
    if created_at is not None:
        memory.created_at = created_at
        memory.structured_attributes = structured_attributes(created_at)
    memory.updated_at = timezone.now()
    memory.save()
    _history(memory, MemoryHistory.Event.UPDATE, old=old_text, actor=actor).save()
    return memory


def _mark_deleted(memories: Iterable[Memory], actor: str) -> int:
    rows = list(memories)
    if not rows:
        return 0
    now = timezone.now()
    Memory.objects.filter(pk__in=[m.pk for m in rows]).update(
        state=Memory.State.DELETED, updated_at=now
    )
    MemoryHistory.objects.bulk_create(
        _history(m, MemoryHistory.Event.DELETE, old=m.text, actor=actor) for m in rows
    )
    return len(rows)


@transaction.atomic
def do_delete_memory(memory: Memory, *, actor: str) -> None:
    """Mark a memory deleted (hidden everywhere); hard removal is GDPR erasure's job."""
    _mark_deleted([memory], actor)


@transaction.atomic
def do_delete_memories(queryset: MemoryQuerySet, *, actor: str) -> int:
    return _mark_deleted(queryset.active().light().select_for_update(), actor)


@dataclass(frozen=True)
class BatchUpdate:
    memory: Memory
    text: str | None
    metadata: dict[str, Any] | None


@transaction.atomic
def do_batch_update(updates: Sequence[BatchUpdate], *, actor: str) -> int:
    """All or nothing: one transaction for the whole batch."""
    texts = [u.text for u in updates if u.text is not None and u.text != u.memory.text]
    vectors = dict(zip(texts, embed(texts), strict=True)) if texts else {}
    now = timezone.now()
    history = []
    for update in updates:
        memory, old_text = update.memory, update.memory.text
        if update.text is not None and update.text != old_text:
            memory.text, memory.hash = update.text, content_hash(update.text)
            memory.embedding = vectors[update.text]
        if update.metadata is not None:
            memory.metadata = update.metadata
        memory.updated_at = now
        history.append(_history(memory, MemoryHistory.Event.UPDATE, old=old_text, actor=actor))
    Memory.objects.bulk_update(
        [u.memory for u in updates], ["text", "hash", "embedding", "metadata", "updated_at"]
    )
    MemoryHistory.objects.bulk_create(history)
    return len(updates)


@transaction.atomic
def do_batch_delete(memories: Sequence[Memory], *, actor: str) -> int:
    return _mark_deleted(memories, actor)


@transaction.atomic
def do_record_feedback(memory: Memory, *, feedback: str | None, reason: str) -> Feedback:
    return Feedback.objects.create(
        project_id=memory.project_id, memory=memory, feedback=feedback, feedback_reason=reason
    )


@transaction.atomic
def do_create_export(
    project: Project, *, schema: dict[str, Any], filters: dict[str, Any], result: list[Any]
) -> MemoryExport:
    return MemoryExport.objects.create(
        project=project, schema=schema, filters=filters, result=result
    )


@transaction.atomic
def do_queue_add(project: Project, payload: dict[str, Any]) -> MemoryEvent:
    """Record an add request for extraction, and send it to the workers once committed."""
    from memory.extraction.tasks import process_event

    event = MemoryEvent.objects.create(project=project, payload=payload, **payload["scope"])
    args = (str(event.id), str(project.pk))
    transaction.on_commit(lambda: process_event.send(*args))
    return event


def stale_events(now: datetime, pending_for: timedelta) -> list[tuple[str, str]]:
    """(event id, project id) of unfinished events that no queue message will deliver any more.

    PENDING for longer than `pending_for`, or RUNNING under an expired lease, and without a
    message queued, delayed or held by a worker (see memory/management/commands/sweep_events.py).
    """
    found = []
    for project_id in Project.objects.values_list("pk", flat=True):
        with project_context(project_id):
            stale = MemoryEvent.objects.filter(
                Q(status=MemoryEvent.Status.PENDING, created_at__lt=now - pending_for)
                | Q(status=MemoryEvent.Status.RUNNING, lease_until__lt=now)
            ).values_list("pk", flat=True)
            found += [(str(pk), str(project_id)) for pk in stale]
    in_queue = events_in_queue([event_id for event_id, _ in found])
    return [(event_id, project_id) for event_id, project_id in found if event_id not in in_queue]


def events_in_queue(event_ids: Sequence[str]) -> set[str]:
    """Those of `event_ids` that have a process_event message in dramatiq-postgres's queue table.

    'queued' covers messages waiting, due or delayed (a delayed one waits in the queue's ".DQ"
    twin until its available_at); 'consumed' ones are held by a worker, and go back to 'queued'
    if that worker dies (the broker's reaper). Acknowledged messages are deleted; 'rejected'
    ones are dead.
    """
    from memory.extraction.tasks import process_event

    if not event_ids:
        return set()
    # Served by the index of migration 0009 (same expressions).
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT message->'args'->>0 FROM {SCHEMA}.queue "  # noqa: S608 - a constant
            "WHERE message->>'actor_name' = %s AND message->'args'->>0 = ANY(%s) "
            "AND state IN ('queued', 'consumed')",
            [process_event.actor_name, list(event_ids)],
        )
        return {row[0] for row in cursor.fetchall()}
