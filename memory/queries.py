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

from django.db import connection
from django.db.models import CharField, Count, F, IntegerField, Max, Min, Q, QuerySet, Value

from audit.models import ErasureRequest
from memory import graph
from memory.graph.recognise import query_names
from memory.models import (
    SCOPE_FIELDS,
    IdempotentRequest,
    Memory,
    MemoryEvent,
    MemoryExport,
    MemoryHistory,
    MemoryQuerySet,
)
from memory.retrieval.filters import FilterError, compile_filters, scope_fields_named

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
WHERE NOT c.looped AND m.state <> 'deleted'
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
    rows = memories(project_id).light().exclude(state=Memory.State.DELETED).filter(pk__in=ids)
    return list(rows.order_by("created_at", "id").select_for_update())


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


# -- the graph (memory.graph) ------------------------------------------------------------------

# Relations a search answers with, when asked (enable_graph).
SEARCH_RELATIONS = 20


def graph_edges(
    project_id: uuid.UUID, filters: dict[str, Any], *, include_invalid: bool = False
) -> graph.EdgeFilter:
    """What a graph read keeps, for a search filter (memory.retrieval.filters), as search would.

    Scope ids as search reads them: those named must match ("*": any value), the others must
    be unset; at least one has a value. They must be plain values at the top level or under
    AND: the graph tests them on each vertex and edge. Any other condition (categories, dates,
    metadata, keywords, memory_ids, OR / NOT of those) keeps the relations asserted by at
    least one active, unexpired memory the whole filter matches. Raises FilterError.
    """
    where = compile_filters(filters)  # the one parser: validates every condition
    ids: dict[str, str] = {}
    other = False
    pending = [filters]
    while pending:
        for key, value in pending.pop().items():
            if key in SCOPE_FIELDS:
                if isinstance(value, bool) or not isinstance(value, str | int):
                    raise FilterError(
                        f"{key}: the graph takes a scope id as a plain value, or '*' for any."
                    )
                if ids.setdefault(key, str(value)) != str(value):
                    raise FilterError(f"{key} is given two different values.")
            elif key == "AND":
                pending.extend(value)
            elif key in ("OR", "NOT") and any(scope_fields_named(value)):
                raise FilterError(
                    f"the graph takes scope ids at the top level or in AND, not in {key}."
                )
            else:
                other = True
    try:
        match = graph.ScopeMatch.of({f: ids.get(f) for f in SCOPE_FIELDS})
    except ValueError:
        raise FilterError(
            "Give at least one of user_id, agent_id, app_id, run_id with a value (not '*')."
        ) from None
    backed = matching(project_id, where) if other else None
    return graph.EdgeFilter(match, include_invalid=include_invalid, backed_by=backed)


class GraphRelations:
    """The relations of a graph read, for a paginator: counted and sliced in the database."""

    def __init__(self, project_id: uuid.UUID, edges: graph.EdgeFilter) -> None:
        self.project_id = project_id
        self.edges = edges
        self._count: int | None = None

    def __len__(self) -> int:
        if self._count is None:
            self._count = graph.count_relations_in(self.project_id, self.edges)
        return self._count

    def __getitem__(self, page: slice) -> list[graph.Relation]:
        start, stop = page.start or 0, page.stop
        if stop is None or stop <= start:
            return []
        return graph.relations_in(self.project_id, self.edges, limit=stop - start, offset=start)


def graph_relations(project_id: uuid.UUID, edges: graph.EdgeFilter) -> GraphRelations:
    """The relations the filter keeps, oldest first (valid ones unless it includes invalid)."""
    return GraphRelations(project_id, edges)


def graph_traversal(
    project_id: uuid.UUID, edges: graph.EdgeFilter, entity: str, *, depth: int, limit: int
) -> graph.Traversal:
    """What the filtered graph links to the entity named `entity`, up to `depth` hops."""
    return graph.traverse_in(project_id, edges, entity, depth=depth, limit=limit)


def search_relations(
    project_id: uuid.UUID,
    filters: dict[str, Any],
    query: str,
    ranked: Sequence[uuid.UUID],
    *,
    limit: int = SEARCH_RELATIONS,
) -> list[graph.Relation]:
    """The relations a search answers with: the valid ones its results (`ranked`, best first)
    assert, by the rank of their best memory; then, if the filter is one the graph reads
    (graph_edges), the valid ones touching an entity the query names, oldest first."""
    found = {r.id: r for r in graph.relations_of_memories(project_id, ranked, limit=limit)}
    if len(found) < limit:
        try:
            edges = graph_edges(project_id, filters)
        except FilterError:
            edges = None  # no scope id, or one under OR: only the results' own relations
        if edges is not None:
            for relation in graph.relations_touching_in(
                project_id, edges, query_names(query), limit=limit
            ):
                found.setdefault(relation.id, relation)
    return list(found.values())[:limit]


def erasure(project_id: uuid.UUID, request_id: uuid.UUID) -> ErasureRequest | None:
    """An erasure asked through the API (audit.models.ErasureRequest), in the project."""
    return ErasureRequest.objects.filter(project_id=project_id, pk=request_id).first()
