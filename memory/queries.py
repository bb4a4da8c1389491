"""The only readers of memory state: request-free, by project and typed arguments.

Views, dashboards, the admin, commands and the extraction pipeline all read through these (and
the MemoryQuerySet methods they build on). Each runs in the caller's tenant context
(tenants.db.project_context): without one, row-level security shows no rows at all, so a read
that forgot its context finds nothing rather than another tenant's memories.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from django.db.models import CharField, Count, F, IntegerField, Max, Min, Q, QuerySet, Value

from memory.models import (
    IdempotentRequest,
    Memory,
    MemoryEvent,
    MemoryExport,
    MemoryHistory,
    MemoryQuerySet,
)

# Entity types of the Mem0 API and the scope field each one is.
ENTITY_TYPES = {"user": "user_id", "agent": "agent_id", "app": "app_id", "run": "run_id"}


def memories(project_id: uuid.UUID) -> MemoryQuerySet:
    """Every memory of the project, in any state."""
    return Memory.objects.for_project(project_id)


def idempotent_request(project_id: uuid.UUID, key: str) -> IdempotentRequest | None:
    """The project's record of an Idempotency-Key, expired or not (by the unique index)."""
    return IdempotentRequest.objects.filter(project_id=project_id, key=key).first()


def get_memory(project_id: uuid.UUID, memory_id: uuid.UUID) -> Memory | None:
    """The project's memory, unless deleted; None for another project's id too (no leak)."""
    found = memories(project_id).light().exclude(state=Memory.State.DELETED).filter(pk=memory_id)
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
) -> MemoryQuerySet:
    """Active memories matching a compiled filter (memory.retrieval.filters) and options."""
    queryset = memories(project_id).active().filter(where)
    if not show_expired:
        queryset = queryset.unexpired()
    if categories:
        queryset = queryset.filter(categories__overlap=[c.lower() for c in categories])
    if created_from:
        queryset = queryset.filter(created_at__gte=created_from)
    if created_to:
        queryset = queryset.filter(created_at__lte=created_to)
    return queryset


def expired(project_id: uuid.UUID, *, before: date) -> MemoryQuerySet:
    """Active memories whose expiration date is before `before`."""
    return memories(project_id).active().filter(expiration_date__lt=before)


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


def events(project_id: uuid.UUID, status: str | None = None) -> QuerySet[MemoryEvent]:
    """The project's add requests, newest first, optionally of one status."""
    found = MemoryEvent.objects.filter(project_id=project_id)
    if status:
        found = found.filter(status=status)
    return found.order_by("-created_at", "-id")


def event(project_id: uuid.UUID, event_id: uuid.UUID) -> MemoryEvent | None:
    return MemoryEvent.objects.filter(project_id=project_id, pk=event_id).first()


def export(
    project_id: uuid.UUID,
    *,
    export_id: uuid.UUID | None = None,
    filters: dict[str, Any] | None = None,
) -> MemoryExport | None:
    """An export by id, or the latest one made with exactly these filters, or the latest."""
    found = MemoryExport.objects.filter(project_id=project_id)
    if export_id is not None:
        found = found.filter(pk=export_id)
    elif filters is not None:
        found = found.filter(filters=filters)
    return found.order_by("-created_at").first()
