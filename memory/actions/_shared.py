"""Private helpers of the actions: history rows, actor parsing, and the on-commit entity
linking that every writer of memory text schedules.

May import memory.actions.common, memory.models and memory.jobs; nothing else of
memory.actions.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from memory import jobs
from memory.actions.common import Actor
from memory.models import SCOPE_FIELDS, Memory, MemoryHistory


def _history(
    memory: Memory, event: str, *, old: str | None, actor: Actor, **extra: Any
) -> MemoryHistory:
    return MemoryHistory(
        project_id=memory.project_id,
        memory_id=memory.id,
        event=event,
        old_memory=old,
        new_memory=memory.text if event != MemoryHistory.Event.DELETE else None,
        actor=str(actor),
        event_id=extra.pop("event_id", None) or _event_of(actor),
        metadata=memory.metadata,
        categories=list(memory.categories),
        **{f: getattr(memory, f) for f in SCOPE_FIELDS},
        **extra,
    )


def _event_of(actor: Actor) -> uuid.UUID | None:
    """The add request behind an extraction's change (history links it)."""
    return uuid.UUID(actor.id) if actor.kind == "extractor" else None


def _as_actor(actor: Actor | str) -> Actor:
    if isinstance(actor, Actor):
        return actor
    kind, _, ident = actor.partition(":")
    return Actor(kind, ident)


def schedule_entity_linking(project_id: uuid.UUID, memory_ids: Sequence[uuid.UUID]) -> None:
    """Link these memories to the entities they mention, once this transaction has committed:
    off the request path, in the worker (memory.extraction.tasks.link_entities), so an add is
    not slowed by the graph. Links are only added: text that no longer names an entity keeps
    its old link until the memory is deleted."""
    if not memory_ids:
        return
    args = (str(project_id), [str(m) for m in memory_ids])
    # A lost send (the database gone right after the commit) leaves these memories without
    # their entity links (search works; the entity signal misses them) and is logged.
    transaction.on_commit(lambda: jobs.LINK_ENTITIES.send(*args), robust=True)
