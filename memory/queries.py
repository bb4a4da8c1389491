"""The only readers of memory state: request-free, by project and typed arguments.

Views, dashboards, the admin, commands and the extraction pipeline all read through these (and
the MemoryQuerySet methods they build on). Each runs in the caller's tenant context
(tenants.db.project_context): without one, row-level security shows no rows at all, so a read
that forgot its context finds nothing rather than another tenant's memories.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import (
    BigIntegerField,
    CharField,
    Count,
    F,
    IntegerField,
    Max,
    Min,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, TruncDate

from audit.models import ErasureRequest
from memory import graph
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
from memory.text.recognise import query_names
from tenants.models import Project

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


def events(
    project_id: uuid.UUID, status: str | None = None, *, user_id: str | None = None
) -> QuerySet[MemoryEvent]:
    """The project's add requests, newest first, optionally of one status and one user."""
    found = MemoryEvent.objects.filter(project_id=project_id)
    if status:
        found = found.filter(status=status)
    if user_id:
        found = found.filter(user_id=user_id)
    return found.order_by("-created_at", "-id")


def _usage_total(key: str) -> Coalesce:
    return Coalesce(Sum(Cast(KT(f"usage__{key}"), BigIntegerField())), 0)


def usage_per_day(project_id: uuid.UUID, *, since: datetime) -> list[dict[str, Any]]:
    """Add requests created from `since` and their model usage (MemoryEvent.usage), per day
    (in the current time zone), newest first: day, events, calls, input_tokens,
    output_tokens. One GROUP BY query; events without usage (offline, pending) count 0."""
    rows = (
        MemoryEvent.objects.filter(project_id=project_id, created_at__gte=since)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(
            events=Count("id"),
            **{key: _usage_total(key) for key in ("calls", "input_tokens", "output_tokens")},
        )
        .order_by("-day")
    )
    return list(rows)


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


# --- dashboard: scopes and memories (memory.web.memories) --------------------------------------

# One statement per scope kind, UNION ALL-ed: the kind's ids with their active memories, most
# first, capped; count(*) OVER () runs after GROUP BY and before LIMIT, so it is the number of
# distinct ids matching, in the same scan. The field names come from ENTITY_TYPES, never from
# input; the filter text is a parameter (strpos: a substring, no LIKE pattern to escape).
_SCOPE_COUNTS = """(
SELECT %(kind_{kind})s AS kind, {field} AS entity, count(*) AS total, count(*) OVER () AS ids
FROM memory_memory
WHERE project_id = %(project)s AND state = 'active' AND {field} IS NOT NULL
  AND strpos(lower({field}), lower(%(contains)s)) > 0
GROUP BY {field} ORDER BY total DESC, {field} LIMIT %(limit)s
)"""


@dataclass(frozen=True)
class ScopeCounts:
    top: list[tuple[str, int]]  # (scope id, active memories), most first
    matching: int  # how many ids matched in all


def scope_counts(
    project_id: uuid.UUID, *, contains: str = "", limit: int = 25
) -> dict[str, ScopeCounts]:
    """For each scope kind (user, agent, app, run): its ids containing `contains` (any case)
    with their number of active memories, at most `limit`, most first. One query."""
    sql = " UNION ALL ".join(
        _SCOPE_COUNTS.format(kind=kind, field=field) for kind, field in ENTITY_TYPES.items()
    )
    params: dict[str, Any] = {"project": project_id, "contains": contains, "limit": limit}
    params.update({f"kind_{kind}": kind for kind in ENTITY_TYPES})
    top: dict[str, list[tuple[str, int]]] = {kind: [] for kind in ENTITY_TYPES}
    matching = dict.fromkeys(ENTITY_TYPES, 0)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for kind, entity, total, ids in cursor.fetchall():
            top[kind].append((entity, total))
            matching[kind] = ids
    return {kind: ScopeCounts(top[kind], matching[kind]) for kind in ENTITY_TYPES}


def browse_memories(
    project_id: uuid.UUID,
    *,
    scope: dict[str, str],
    state: str | None = Memory.State.ACTIVE,
    categories: Sequence[str] = (),
    created_from: datetime | None = None,
    created_to: datetime | None = None,
) -> MemoryQuerySet:
    """The dashboard's list: the project's memories whose scope ids equal those given (the
    others may be anything), in `state` (None: any but redacted, which is never listed),
    expired or not, newest first."""
    found = memories(project_id).light().filter(**{f: v for f, v in scope.items() if v})
    if state is not None:
        found = found.filter(state=state)
    else:
        found = found.exclude(state=Memory.State.REDACTED)
    if categories:
        found = found.filter(categories__overlap=[c.lower() for c in categories])
    if created_from:
        found = found.filter(created_at__gte=created_from)
    if created_to:
        found = found.filter(created_at__lte=created_to)
    return found.order_by("-created_at", "-id")


def memory_in_any_state(project_id: uuid.UUID, memory_id: uuid.UUID) -> Memory | None:
    """The project's memory, deleted or superseded too (the dashboard shows and restores
    those); None for another project's id."""
    return memories(project_id).light().filter(pk=memory_id).first()


# --- end-user dashboard (memory/web/enduser.py): one user's own memories --------------------


def user_memories(project_id: uuid.UUID, user_id: str) -> MemoryQuerySet:
    """The user's own scope: their active memories, whatever the agent, app or run, newest
    first (by the partial (project, user_id, created_at) index)."""
    return memories(project_id).active().filter(user_id=user_id).order_by("-created_at", "-id")


def user_memory(project_id: uuid.UUID, user_id: str, memory_id: uuid.UUID) -> Memory | None:
    """One active memory of the user; None for another user's or another project's id."""
    return user_memories(project_id, user_id).light().filter(pk=memory_id).first()


def source_messages(project_id: uuid.UUID, memory: Memory) -> list[dict[str, Any]]:
    """Where a memory came from: the messages of its add request (each with `role`, `content`,
    `name` and `used`, true for the messages it was taken from), or for a message stored
    verbatim (infer=false, no request row) the message its ADD history row kept; [] if none."""
    if memory.source_event_id is None:
        return []
    found = MemoryEvent.objects.filter(
        project_id=project_id, pk=memory.source_event_id, user_id=memory.user_id
    ).values_list("payload", flat=True)
    payload = next(iter(found), None)
    if isinstance(payload, dict) and isinstance(payload.get("messages"), list):
        used = set(memory.source_positions)
        return [
            {**message, "used": position in used}
            for position, message in enumerate(payload["messages"])
            if isinstance(message, dict)
        ]
    added = MemoryHistory.objects.filter(
        project_id=project_id, memory_id=memory.id, event=MemoryHistory.Event.ADD
    ).values_list("input", flat=True)
    kept = next(iter(added), None) or []
    return [{**m, "used": True} for m in kept if isinstance(m, dict)]


def histories(
    project_id: uuid.UUID, memory_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[MemoryHistory]]:
    """The history of each of `memory_ids`, oldest first, in one query."""
    found: dict[uuid.UUID, list[MemoryHistory]] = {memory_id: [] for memory_id in memory_ids}
    rows = MemoryHistory.objects.filter(project_id=project_id, memory_id__in=list(memory_ids))
    for row in rows.order_by("created_at", "id"):
        found[row.memory_id].append(row)
    return found


# -- Retention (purge_expired)


@dataclass(frozen=True)
class Retention:
    """What purge_expired erases in one project now (None: that store is kept for ever)."""

    today: date
    deleted_before: datetime | None
    events_before: datetime | None


def retention(project: Project, now: datetime) -> Retention:
    """The project's retention periods (its own, else the server's defaults; 0 keeps)."""

    def cutoff(days: int | None, default: int) -> datetime | None:
        chosen = default if days is None else days
        return now - timedelta(days=chosen) if chosen else None

    return Retention(
        today=now.date(),
        deleted_before=cutoff(
            project.deleted_retention_days, settings.ENGRAM_DELETED_RETENTION_DAYS
        ),
        events_before=cutoff(project.event_retention_days, settings.ENGRAM_EVENT_RETENTION_DAYS),
    )


def retention_due(project_id: uuid.UUID, policy: Retention) -> list[uuid.UUID]:
    """The memories to erase for good, oldest first: those deleted before
    `policy.deleted_before` (a delete stamps updated_at); none if deleted ones are kept."""
    if policy.deleted_before is None:
        return []
    rows = memories(project_id).filter(
        state=Memory.State.DELETED, updated_at__lt=policy.deleted_before
    )
    return list(rows.order_by("updated_at", "id").values_list("pk", flat=True))
