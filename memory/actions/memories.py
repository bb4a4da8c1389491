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
from django.db.models import F
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


@dataclass(frozen=True)
class MemoryEdit:
    """A memory changed in place, and what its new text did to the graph facts it backed."""

    memory: Memory
    # Facts that ended: only the old wording backed them (invalid now, kept, restorable).
    ended: list[graph.Relation]
    # Facts it backs again: the new text is a wording that backed them before.
    backed_again: list[graph.Relation]

    def graph_note(self) -> str:
        """What the edit did to the graph, in words ("" when nothing): the facts named."""
        parts = []
        if self.ended:
            named = "; ".join(r.phrase() for r in self.ended)
            parts.append(
                f"Graph facts only the old wording backed have ended: {named} (making that "
                "text current again brings them back)."
            )
        if self.backed_again:
            named = "; ".join(r.phrase() for r in self.backed_again)
            parts.append(f"Graph facts this wording backed before hold again: {named}.")
        return " ".join(parts)


def do_update_memory(
    memory: Memory,
    *,
    actor: Actor | str,
    text: str | None = None,
    metadata: dict[str, Any] | None = None,
    expiration_date: date | None = UNSET,
    created_at: datetime | None = None,
    vector: Vector | None = None,
) -> MemoryEdit:
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
        edit = _history(memory, MemoryHistory.Event.UPDATE, old=old_text, actor=who)
        edit.save()
        if not new_text:
            return MemoryEdit(memory, [], [])
        ended, again = _reworded(memory.project_id, {memory.pk: edit.pk})[memory.pk]
        schedule_entity_linking(memory.project_id, [memory.pk])
    return MemoryEdit(memory, ended, again)


def _reworded(
    project_id: uuid.UUID, edits: Mapping[uuid.UUID, uuid.UUID]
) -> dict[uuid.UUID, tuple[list[graph.Relation], list[graph.Relation]]]:
    """The graph after these memories' texts changed (each memory id to its edit's history
    row, saved): the old wording's relations no longer hold (the memory stops backing them;
    invalidated unless another active memory backs them); a wording that backed relations
    before backs them again (an earlier version made current). No re-extraction: a new
    wording gets no new relations. Each memory's (ended, backed again)."""
    left = graph.retract_memories(project_id, [], reworded=edits)
    before = _edits_replacing(project_id, list(edits))
    found = {}
    for memory_id, edit in edits.items():
        said = f"{memory_id}:{edit}"
        ended = [r for r in left if not r.valid and said in r.reworded]
        again = graph.rejoin_wording(project_id, memory_id, before.get(memory_id, []))
        found[memory_id] = (ended, again)
    return found


def _edits_replacing(
    project_id: uuid.UUID, memory_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[uuid.UUID]]:
    """For each memory, its earlier edits whose old text is its text now: the ids of the
    history rows that replaced the wording it has again."""
    rows = MemoryHistory.objects.filter(
        project_id=project_id,
        memory_id__in=memory_ids,
        event=MemoryHistory.Event.UPDATE,
        memory__text=F("old_memory"),
    ).values_list("memory_id", "pk")
    found: dict[uuid.UUID, list[uuid.UUID]] = {}
    for memory_id, pk in rows:
        found.setdefault(memory_id, []).append(pk)
    return found


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
                memory.language = detect(update.text)
                memory.embedding = known[update.text]
            if update.metadata is not None:
                memory.metadata = update.metadata
            memory.updated_at = now
            history.append(_history(memory, MemoryHistory.Event.UPDATE, old=old_text, actor=who))
        Memory.objects.bulk_update(
            [u.memory for u in updates],
            ["text", "hash", "language", "embedding", "metadata", "updated_at"],
        )
        MemoryHistory.objects.bulk_create(history)
        changed = {h.memory_id: h.pk for h in history if h.old_memory != h.new_memory}
        if changed:  # as in do_update_memory
            _reworded(updates[0].memory.project_id, changed)
            schedule_entity_linking(updates[0].memory.project_id, list(changed))
    return len(updates)


def do_batch_delete(memories: Sequence[Memory], *, actor: Actor | str) -> int:
    if not memories:
        return 0
    return _mark_deleted(memories[0].project_id, memories, _as_actor(actor))
