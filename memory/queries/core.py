"""Memories: the project's memories in any state (memories(), every read's base), one memory,
the active ones to change, those matching a compiled filter, the chains of superseded ones,
one scope's memories, the scope ids in use (entities), and memories' histories.

May import memory.models and Django; no other module of this package.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import CharField, Count, F, IntegerField, Max, Min, Q, QuerySet, Value

from memory.models import Memory, MemoryHistory, MemoryQuerySet

# Entity types of the Mem0 API and the scope field each one is.
ENTITY_TYPES = {"user": "user_id", "agent": "agent_id", "app": "app_id", "run": "run_id"}


def memories(project_id: uuid.UUID) -> MemoryQuerySet:
    """Every memory of the project, in any state."""
    return Memory.objects.for_project(project_id)


def get_memory(project_id: uuid.UUID, memory_id: uuid.UUID) -> Memory | None:
    """The project's memory, unless deleted; None for another project's id too (no leak)."""
    gone = (Memory.State.DELETED, Memory.State.REDACTED)
    found = memories(project_id).light().exclude(state__in=gone).filter(pk=memory_id)
    return next(iter(found), None)


def active_for_update(project_id: uuid.UUID, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Memory]:
    """The project's active memories among `ids`, locked for the caller's transaction."""
    rows = memories(project_id).active().filter(pk__in=ids).select_for_update()
    return {m.id: m for m in rows}


def matching(
    project_id: uuid.UUID,
    where: Q,
    *,
    show_expired: bool = False,
    categories: Sequence[str] = (),
    created_from: datetime | None = None,
    created_to: datetime | None = None,
    latest_only: bool = True,
) -> MemoryQuerySet:
    """Active memories matching a compiled filter (memory.retrieval.filters) and options;
    with `latest_only` false, superseded ones too (Mem0's read flag; deleted ones never)."""
    queryset = memories(project_id).filter(where)
    if latest_only:
        queryset = queryset.active()
    else:
        # An OR, not IN: each arm implies the predicate of its partial scope indexes (active
        # ones, and memory_superseded_*), so the planner can OR two index scans.
        queryset = queryset.filter(Q(state=Memory.State.ACTIVE) | Q(state=Memory.State.SUPERSEDED))
    if not show_expired:
        queryset = queryset.unexpired()
    if categories:
        queryset = queryset.filter(categories__overlap=[c.lower() for c in categories])
    if created_from:
        queryset = queryset.filter(created_at__gte=created_from)
    if created_to:
        queryset = queryset.filter(created_at__lte=created_to)
    return queryset


# The memories each of `ids` superseded, transitively: a memory's predecessors are those whose
# replaced_by is it (by the foreign key's index). The walk goes through deleted predecessors
# too (a chain stays a chain), but only those not deleted are listed, nearest first.
_LINKED = """
WITH RECURSIVE chain(root, id, depth) AS (
    SELECT m.replaced_by_id, m.id, 1 FROM memory_memory m
    WHERE m.project_id = %(project)s AND m.replaced_by_id = ANY(%(ids)s::uuid[])
  UNION ALL
    SELECT c.root, m.id, c.depth + 1 FROM chain c
    JOIN memory_memory m ON m.replaced_by_id = c.id AND m.project_id = %(project)s
) CYCLE id SET looped USING path
SELECT c.root, c.id FROM chain c JOIN memory_memory m ON m.id = c.id
WHERE NOT c.looped AND m.state NOT IN ('deleted', 'redacted')
ORDER BY c.root, c.depth, m.created_at DESC, m.id
"""


def linked_memory_ids(
    project_id: uuid.UUID, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[uuid.UUID]]:
    """For each of `ids`, the project's memories it superseded, transitively, nearest first
    (Mem0's `linked_memory_ids`): what a delete with delete_linked also deletes. One query."""
    linked: dict[uuid.UUID, list[uuid.UUID]] = {memory_id: [] for memory_id in ids}
    if not ids:
        return linked
    with connection.cursor() as cursor:
        cursor.execute(_LINKED, {"project": project_id, "ids": list(ids)})
        for root, memory_id in cursor.fetchall():
            linked[root].append(memory_id)
    return linked


def linked_for_update(project_id: uuid.UUID, memory_id: uuid.UUID) -> list[Memory]:
    """The memories `memory_id` superseded, transitively and not deleted, oldest first, locked
    for the caller's transaction (a delete with delete_linked)."""
    ids = linked_memory_ids(project_id, [memory_id])[memory_id]
    gone = (Memory.State.DELETED, Memory.State.REDACTED)
    rows = memories(project_id).light().exclude(state__in=gone).filter(pk__in=ids)
    return list(rows.order_by("created_at", "id").select_for_update())


def scope_lookup(scope: dict[str, Any]) -> dict[str, Any]:
    """ORM lookups for exactly this scope (a missing id must be NULL, not anything)."""
    return {
        f if v is not None else f"{f}__isnull": v if v is not None else True
        for f, v in scope.items()
    }


def scope_memories(project_id: uuid.UUID, scope: dict[str, Any]) -> MemoryQuerySet:
    """The active memories of exactly one scope (extraction compares new facts with these)."""
    return memories(project_id).active().filter(**scope_lookup(scope))


def entities(project_id: uuid.UUID) -> tuple[QuerySet[Any, dict[str, Any]], dict[str, int]]:
    """Users, agents, apps and runs with active memories: rows ordered by type then id (each:
    kind, entity, total, first, last), and the number of each type."""
    active = memories(project_id).active()
    totals = active.aggregate(
        **{f"total_{kind}s": Count(field, distinct=True) for kind, field in ENTITY_TYPES.items()}
    )
    per_kind = [
        active.filter(**{f"{field}__isnull": False})
        .values(field)
        .annotate(
            rank=Value(rank, output_field=IntegerField()),
            kind=Value(kind, output_field=CharField()),
            entity=F(field),
            total=Count("id"),
            first=Min("created_at"),
            last=Max("updated_at"),
        )
        .values("rank", "kind", "entity", "total", "first", "last")
        for rank, (kind, field) in enumerate(ENTITY_TYPES.items())
    ]
    rows = per_kind[0].union(*per_kind[1:], all=True).order_by("rank", "entity")
    return rows, totals


def history(project_id: uuid.UUID, memory_id: uuid.UUID) -> list[MemoryHistory] | None:
    """Every change of one memory, oldest first; None if the project has no such memory."""
    if not memories(project_id).filter(pk=memory_id).exists():
        return None
    rows = MemoryHistory.objects.filter(project_id=project_id, memory_id=memory_id)
    return list(rows.order_by("created_at", "id"))


def histories(
    project_id: uuid.UUID, memory_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[MemoryHistory]]:
    """The history of each of `memory_ids`, oldest first, in one query."""
    found: dict[uuid.UUID, list[MemoryHistory]] = {memory_id: [] for memory_id in memory_ids}
    rows = MemoryHistory.objects.filter(project_id=project_id, memory_id__in=list(memory_ids))
    for row in rows.order_by("created_at", "id"):
        found[row.memory_id].append(row)
    return found
