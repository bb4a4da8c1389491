"""Reverting an add request: undo everything one processed event did to memory, as a whole.

What the event did is read from the history rows it wrote (MemoryHistory.event_id) and from its
graph record (MemoryEvent.graph["invalidated"]: the relations it contradicted). The revert, in
one transaction holding the scope's locks (as extraction holds them when it applies an event):

- a memory the event added is deleted (its relations, backed by no other active memory, are
  invalidated by retraction);
- a memory it superseded (the model's UPDATE) is active again, with no replacement, and the
  relations retracted with it are valid again; its replacement was one of the event's adds;
- a memory it deleted is active again, with its relations;
- a relation it invalidated as contradicted is valid again, when a memory that backs it is
  active (or it cites none) and no valid edge of the same relation exists by now.

Each memory changed gets a history row of kind REVERT, naming who reverted and the reverted
event. When a later change touched one of the event's memories, nothing is done and
RevertConflictError names the memory and the change. A second revert of the same event answers
what the first one did (MemoryEvent.reversal). The scope's running summary, into which the
event's messages were folded, is not unfolded.

May import memory.actions.common and ._shared, memory.graph, memory.models, tenants and
Django.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.utils import timezone

from config.exceptions import RefusedError
from memory import graph
from memory.actions._shared import _history
from memory.actions.common import Actor, check_mutable, hold_scope, hold_user
from memory.models import Memory, MemoryEvent, MemoryHistory
from tenants.db import project_context


class RevertConflictError(RefusedError):
    """The event can't be reverted as a whole (still running, failed, or changed since)."""

    def __init__(self, detail: str, conflicts: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(detail)
        self.detail = detail
        self.conflicts = list(conflicts)


def do_revert_event(project_id: uuid.UUID, event_id: uuid.UUID, *, actor: Actor) -> dict[str, Any]:
    """Undo what the project's event `event_id` did (see the module docstring); what was done,
    as the API answers it. None of it is applied when it raises."""
    with project_context(project_id):
        found = MemoryEvent.objects.filter(project_id=project_id, pk=event_id).first()
        if found is None:
            raise MemoryEvent.DoesNotExist(event_id)
        # The locks extraction and erasure take, in their order, before the event's row.
        hold_user(project_id, found.user_id)
        hold_scope(project_id, found.scope)
        event = MemoryEvent.objects.select_for_update().filter(pk=event_id).first()
        if event is None:  # erased meanwhile
            raise MemoryEvent.DoesNotExist(event_id)
        if event.reverted_at is not None:
            return dict(event.reversal)
        if event.status != MemoryEvent.Status.SUCCEEDED:
            raise RevertConflictError(
                f"Event {event.id} is {event.status}: only a processed (SUCCEEDED) add request "
                "can be reverted; a failed one changed nothing."
            )
        rows = list(
            MemoryHistory.objects.filter(project_id=project_id, event_id=event.id)
            .exclude(event=MemoryHistory.Event.REVERT)
            .order_by("created_at", "id")
        )
        memories = Memory.objects.select_for_update().in_bulk({r.memory_id for r in rows})
        _check_unchanged_since(project_id, event, rows)
        results, relations = _undo(project_id, event, rows, memories, actor)
        relations["revalidated"] += _revalidate(project_id, event)
        now = timezone.now()
        reversal = {
            "id": str(event.id),
            "status": "REVERTED",
            "reverted_at": now.isoformat(),
            "reverted_by": str(actor),
            "results": results,
            "relations": relations,
        }
        event.reverted_at, event.reverted_by = now, str(actor)
        event.reversal = reversal
        event.save(update_fields=["reverted_at", "reverted_by", "reversal"])
    return reversal


def _check_unchanged_since(
    project_id: uuid.UUID, event: MemoryEvent, rows: Sequence[MemoryHistory]
) -> None:
    """Refuse when any memory the event changed has a history row written after the event's
    own last row for it (another add request, a person, an API key)."""
    last: dict[uuid.UUID, Any] = {}
    for row in rows:
        last[row.memory_id] = row.created_at
    if not last:
        return
    later = (
        MemoryHistory.objects.filter(
            project_id=project_id, memory_id__in=list(last), created_at__gt=min(last.values())
        )
        .exclude(event_id=event.id)
        .order_by("created_at", "id")
    )
    conflicts = [
        {
            "memory_id": str(row.memory_id),
            "change": row.event,
            "history_id": str(row.id),
            "event_id": str(row.event_id) if row.event_id else None,
            "actor": row.actor,
            "at": row.created_at.isoformat(),
        }
        for row in later
        if row.created_at > last[row.memory_id]
    ]
    if conflicts:
        first = conflicts[0]
        raise RevertConflictError(
            f"Memory {first['memory_id']} was changed after this add request ({first['change']} "
            f"by {first['actor']} at {first['at']}); nothing was reverted.",
            conflicts,
        )


def _undo(
    project_id: uuid.UUID,
    event: MemoryEvent,
    rows: Sequence[MemoryHistory],
    memories: dict[uuid.UUID, Memory],
    actor: Actor,
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Delete what the event added, then bring back what it superseded or deleted (so that a
    relation both touched is judged against the memories as they end up). The memories
    changed, and the relations invalidated and made valid again on the way."""
    # A memory erased for good since (its row gone) has nothing left to undo.
    added = [
        m for r in rows if r.event == MemoryHistory.Event.ADD and (m := memories.get(r.memory_id))
    ]
    back = [
        m
        for r in rows
        if r.event in (MemoryHistory.Event.UPDATE, MemoryHistory.Event.DELETE)
        and (m := memories.get(r.memory_id))
    ]
    removed = [m for m in added if m.state == Memory.State.ACTIVE]
    for memory in removed:
        check_mutable(memory, actor, "delete")
    now = timezone.now()
    results: list[dict[str, Any]] = []
    history: list[MemoryHistory] = []
    relations: dict[str, list[dict[str, Any]]] = {"invalidated": [], "revalidated": []}
    if removed:
        Memory.objects.filter(pk__in=[m.pk for m in removed]).update(
            state=Memory.State.DELETED, updated_at=now
        )
        for memory in removed:
            history.append(_reverted(memory, event, actor, old=memory.text, new=None))
            results.append({"id": str(memory.id), "memory": memory.text, "event": "DELETE"})
        retracted = graph.retract_memories(project_id, [m.pk for m in removed])
        relations["invalidated"] = [r.reference() for r in retracted]
    restored = [m for m in back if m.state in (Memory.State.SUPERSEDED, Memory.State.DELETED)]
    if restored:
        Memory.objects.filter(pk__in=[m.pk for m in restored]).update(
            state=Memory.State.ACTIVE, replaced_by=None, updated_at=now
        )
        for memory in restored:
            history.append(_reverted(memory, event, actor, old=None, new=memory.text))
            results.append({"id": str(memory.id), "memory": memory.text, "event": "RESTORE"})
        reinstated = graph.reinstate_memories(project_id, [m.pk for m in restored])
        relations["revalidated"] = [r.reference() for r in reinstated if r.valid]
    MemoryHistory.objects.bulk_create(history)
    return results, relations


def _reverted(
    memory: Memory, event: MemoryEvent, actor: Actor, *, old: str | None, new: str | None
) -> MemoryHistory:
    row = _history(memory, MemoryHistory.Event.REVERT, old=old, actor=actor, event_id=event.id)
    row.new_memory = new
    return row


def _revalidate(project_id: uuid.UUID, event: MemoryEvent) -> list[dict[str, Any]]:
    """The relations the event contradicted, valid again where they still hold."""
    ids = [int(r["id"]) for r in (event.graph or {}).get("invalidated", []) if "id" in r]
    if not ids:
        return []
    return [r.reference() for r in graph.revalidate_relations(project_id, ids) if r.valid]
