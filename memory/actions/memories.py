"""The life of one memory or a batch of them: create from extracted text, supersede, update
in place, delete (one, linked, all of a queryset, a batch), restore, batch update.

May import memory.actions.common and memory.actions._shared, memory.graph, memory.models,
memory.text, tenants and Django.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from memory import graph
from memory.actions._shared import _as_actor, _history, schedule_entity_linking
from memory.actions.common import (
    UNSET,
    Actor,
    ImmutableMemoryError,
    NotRestorableError,
    Vector,
    check_mutable,
    embed_texts,
)
from memory.models import Memory, MemoryHistory, MemoryQuerySet, content_hash, structured_attributes
from memory.text.embeddings import embed
from memory.text.language import detect
from tenants.db import project_context


@dataclass(frozen=True)
class NewMemory:
    """One memory to create from extracted text (the pipeline's ADD and UPDATE)."""

    text: str
    vector: Vector
    scope: dict[str, Any]
    metadata: dict[str, Any]
    categories: list[str]
    expiration_date: date | str | None = None
    immutable: bool = False
    source_event_id: uuid.UUID | None = None
    source_positions: Sequence[int] = ()
    # When what it says was observed (the add request's `timestamp`, else when the request
    # came); now when None.
    created_at: datetime | None = None


def do_create_memory(project_id: uuid.UUID, new: NewMemory, *, actor: Actor) -> Memory:
    """Create one memory from extracted text, with its ADD history row."""
    moment = new.created_at or timezone.now()
    with project_context(project_id):
        memory = Memory.objects.create(
            project_id=project_id,
            text=new.text,
            language=detect(new.text),
            hash=content_hash(new.text),
            embedding=new.vector,
            metadata=new.metadata,
            expiration_date=new.expiration_date,
            immutable=new.immutable,
            categories=new.categories,
            created_at=moment,
            updated_at=timezone.now(),
            structured_attributes=structured_attributes(moment),
            source_event_id=new.source_event_id,
            source_positions=list(new.source_positions),
            **new.scope,
        )
        _history(memory, MemoryHistory.Event.ADD, old=None, actor=actor).save()
        schedule_entity_linking(project_id, [memory.pk])
    return memory


def do_supersede_memory(memory: Memory, new: NewMemory, *, actor: Actor) -> Memory:
    """Replace a memory by a new one (the model's UPDATE): the old one is kept, `superseded`,
    pointing to its replacement, so the lineage stays readable. Returns the new memory."""
    check_mutable(memory, actor, "update")
    with project_context(memory.project_id):
        replacement = do_create_memory(memory.project_id, new, actor=actor)
        memory.state, memory.replaced_by, memory.updated_at = (
            Memory.State.SUPERSEDED,
            replacement,
            timezone.now(),
        )
        memory.save(update_fields=["state", "replaced_by", "updated_at"])
        history = _history(memory, MemoryHistory.Event.UPDATE, old=memory.text, actor=actor)
        history.new_memory = replacement.text
        history.save()
        # The old memory no longer backs its relations (the replacement asserts its own).
        graph.retract_memories(memory.project_id, [memory.pk])
    return replacement


def do_update_memory(
    memory: Memory,
    *,
    actor: Actor | str,
    text: str | None = None,
    metadata: dict[str, Any] | None = None,
    expiration_date: date | None = UNSET,
    created_at: datetime | None = None,
    vector: Vector | None = None,
) -> Memory:
    """Change a memory in place (re-embedding new text) and record the change."""
    who = _as_actor(actor)
    check_mutable(memory, who, "update")
    new_text = text is not None and text != memory.text
    if new_text and vector is None:
        vector = embed([str(text)])[0]
    with project_context(memory.project_id):
        old_text = memory.text
        if new_text:
            memory.text = str(text)
            memory.language = detect(memory.text)
            memory.hash = content_hash(memory.text)
            memory.embedding = vector
        if metadata is not None:
            memory.metadata = metadata
        if expiration_date is not UNSET:
            memory.expiration_date = expiration_date
        if created_at is not None:
            memory.created_at = created_at
            memory.structured_attributes = structured_attributes(created_at)
        memory.updated_at = timezone.now()
        memory.save()
        _history(memory, MemoryHistory.Event.UPDATE, old=old_text, actor=who).save()
        if new_text:
            # The old wording's relations no longer hold: the memory stops backing them (they
            # are invalidated unless another active memory backs them). No re-extraction.
            graph.retract_memories(memory.project_id, [memory.pk], reworded=True)
            schedule_entity_linking(memory.project_id, [memory.pk])
    return memory


def _mark_deleted(project_id: uuid.UUID, memories: Iterable[Memory], actor: Actor) -> int:
    rows = list(memories)
    for memory in rows:
        check_mutable(memory, actor, "delete")
    if not rows:
        return 0
    with project_context(project_id):
        Memory.objects.filter(pk__in=[m.pk for m in rows]).update(
            state=Memory.State.DELETED, updated_at=timezone.now()
        )
        MemoryHistory.objects.bulk_create(
            _history(m, MemoryHistory.Event.DELETE, old=m.text, actor=actor) for m in rows
        )
        # Relations only these memories backed are invalidated (kept, restorable).
        graph.retract_memories(project_id, [m.pk for m in rows])
    return len(rows)


def do_delete_memory(memory: Memory, *, actor: Actor | str, linked: Sequence[Memory] = ()) -> int:
    """Mark a memory deleted (hidden everywhere); hard removal is GDPR erasure's job.

    `linked`: the memories it superseded, transitively (queries.linked_for_update; Mem0's
    delete_linked), deleted with it in the same transaction, each with its history row, so an
    older version cannot resurface once the current one is gone. An immutable memory is deleted
    only when named: one among `linked` refuses the whole delete. Returns how many of `linked`
    were deleted (Mem0's cascade_count).
    """
    for older in linked:
        if older.immutable:
            raise ImmutableMemoryError(
                f"Memory {older.id}, which {memory.id} superseded, is immutable: it is deleted "
                "only when named. Nothing was deleted."
            )
    _mark_deleted(memory.project_id, [memory, *linked], _as_actor(actor))
    return len(linked)


def do_delete_memories(queryset: MemoryQuerySet, *, actor: Actor | str) -> int:
    """Delete every active memory of `queryset` (already scoped to one project)."""
    with transaction.atomic():
        rows = list(queryset.active().light().select_for_update())
        if not rows:
            return 0
        return _mark_deleted(rows[0].project_id, rows, _as_actor(actor))


def do_restore_memory(memory: Memory, *, actor: Actor | str) -> Memory:
    """Make a deleted memory active again (an operator correcting a wrong deletion)."""
    who = _as_actor(actor)
    if memory.state != Memory.State.DELETED:
        raise NotRestorableError(f"Memory {memory.id} is {memory.state}; only a deleted one.")
    with project_context(memory.project_id):
        memory.state, memory.updated_at = Memory.State.ACTIVE, timezone.now()
        memory.save(update_fields=["state", "updated_at"])
        _history(memory, MemoryHistory.Event.RESTORE, old=None, actor=who).save()
        # Relations invalidated only by its retraction are valid again.
        graph.reinstate_memories(memory.project_id, [memory.pk])
    return memory


@dataclass(frozen=True)
class BatchUpdate:
    memory: Memory
    text: str | None
    metadata: dict[str, Any] | None


def do_batch_update(
    updates: Sequence[BatchUpdate],
    *,
    actor: Actor | str,
    vectors: Mapping[str, Vector] | None = None,
) -> int:
    """All or nothing: one transaction for the whole batch, no change if one is immutable."""
    who = _as_actor(actor)
    for update in updates:
        check_mutable(update.memory, who, "update")
    texts = [u.text for u in updates if u.text is not None and u.text != u.memory.text]
    known = embed_texts(texts, vectors)
    if not updates:
        return 0
    now = timezone.now()
    history = []
    with project_context(updates[0].memory.project_id):
        for update in updates:
            memory, old_text = update.memory, update.memory.text
            if update.text is not None and update.text != old_text:
                memory.text, memory.hash = update.text, content_hash(update.text)
                memory.embedding = known[update.text]
            if update.metadata is not None:
                memory.metadata = update.metadata
            memory.updated_at = now
            history.append(_history(memory, MemoryHistory.Event.UPDATE, old=old_text, actor=who))
        Memory.objects.bulk_update(
            [u.memory for u in updates], ["text", "hash", "embedding", "metadata", "updated_at"]
        )
        MemoryHistory.objects.bulk_create(history)
        changed = [h.memory_id for h in history if h.old_memory != h.new_memory]
        # As in do_update_memory: reworded memories stop backing their old relations.
        graph.retract_memories(updates[0].memory.project_id, changed, reworded=True)
        schedule_entity_linking(updates[0].memory.project_id, changed)
    return len(updates)


def do_batch_delete(memories: Sequence[Memory], *, actor: Actor | str) -> int:
    if not memories:
        return 0
    return _mark_deleted(memories[0].project_id, memories, _as_actor(actor))
