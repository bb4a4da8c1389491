"""The dashboards' reads (memory.web): scope ids with their counts, the memory browser, a
memory in any state, memories' texts by id, one end user's own memories, and where a memory
came from.

May import memory.queries.core, memory.graph (reads), memory.models and Django.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Exists, OuterRef, Subquery

from memory import graph
from memory.models import Memory, MemoryEvent, MemoryHistory, MemoryQuerySet
from memory.queries.core import ENTITY_TYPES, memories

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
    contains: str = "",
) -> MemoryQuerySet:
    """The dashboard's list: the project's memories whose scope ids equal those given (the
    others may be anything), in `state` (None: any but redacted, which is never listed),
    expired or not, whose text contains `contains` in any case (a plain filter, LIKE: a scan
    of the scope), newest first."""
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
    if contains:
        found = found.filter(text__icontains=contains)
    return found.order_by("-created_at", "-id")


def memory_in_any_state(project_id: uuid.UUID, memory_id: uuid.UUID) -> Memory | None:
    """The project's memory, deleted or superseded too (the dashboard shows and restores
    those); None for another project's id."""
    return memories(project_id).light().filter(pk=memory_id).first()


def memory_texts(
    project_id: uuid.UUID, memory_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, tuple[str, str]]:
    """(text, state) of each of these memories of the project, in any state, in one query;
    a redacted memory's text is "". Ids not found (another project's) are left out."""
    rows = memories(project_id).filter(pk__in=set(memory_ids)).values_list("id", "text", "state")
    return {pk: ("" if state == Memory.State.REDACTED else text, state) for pk, text, state in rows}


# --- end-user dashboard (memory/web/enduser.py): one user's own memories --------------------


def user_memories(project_id: uuid.UUID, user_id: str) -> MemoryQuerySet:
    """The user's own scope: their active memories, whatever the agent, app or run, newest
    first (by the partial (project, user_id, created_at) index)."""
    return memories(project_id).active().filter(user_id=user_id).order_by("-created_at", "-id")


def user_memories_listed(project_id: uuid.UUID, user_id: str) -> MemoryQuerySet:
    """The user's memories as their own page lists them: without vectors, each with `changed`,
    whether its text was ever changed since it was remembered (an edit, a restore or a revert of
    it, or a memory it replaced), by two indexed EXISTS per row of the page."""
    edits = MemoryHistory.objects.filter(
        memory_id=OuterRef("pk"),
        event__in=[
            MemoryHistory.Event.UPDATE,
            MemoryHistory.Event.RESTORE,
            MemoryHistory.Event.REVERT,
        ],
    )
    replaced = Memory.objects.filter(replaced_by_id=OuterRef("pk"))
    return (
        user_memories(project_id, user_id)
        .light()
        .annotate(changed=Exists(edits) | Exists(replaced))
    )


def user_memory(project_id: uuid.UUID, user_id: str, memory_id: uuid.UUID) -> Memory | None:
    """One active memory of the user; None for another user's or another project's id."""
    return user_memories(project_id, user_id).light().filter(pk=memory_id).first()


def user_deleted_memories(project_id: uuid.UUID, user_id: str) -> MemoryQuerySet:
    """The user's deleted memories, still restorable (not erased yet), the latest deleted
    first (a delete stamps updated_at), each with `deleted_by`: the actor of the history row
    that deleted it (a DELETE, or the REVERT of the add request that made it)."""
    deleting = MemoryHistory.objects.filter(
        memory_id=OuterRef("pk"),
        event__in=[MemoryHistory.Event.DELETE, MemoryHistory.Event.REVERT],
    ).order_by("-created_at", "-id")
    return (
        memories(project_id)
        .filter(user_id=user_id, state=Memory.State.DELETED)
        .annotate(deleted_by=Subquery(deleting.values("actor")[:1]))
        .order_by("-updated_at", "-id")
    )


def user_memory_kept(project_id: uuid.UUID, user_id: str, memory_id: uuid.UUID) -> Memory | None:
    """One memory of the user that is active or deleted (not superseded, not redacted); None
    for another user's or another project's id."""
    kept = (Memory.State.ACTIVE, Memory.State.DELETED)
    found = memories(project_id).light().filter(user_id=user_id, pk=memory_id, state__in=kept)
    return found.first()


def user_relations(project_id: uuid.UUID, user_id: str, limit: int) -> list[graph.Relation]:
    """The graph relations of the user's scopes (whatever the agent, app or run), valid and
    invalidated, oldest first, at most `limit`."""
    edges = graph.EdgeFilter(graph.ScopeMatch.of({"user_id": user_id}), include_invalid=True)
    found: list[graph.Relation] = []
    while len(found) < limit:
        page = min(graph.MAX_LIMIT, limit - len(found))
        rows = graph.relations_in(project_id, edges, limit=page, offset=len(found))
        found += rows
        if len(rows) < page:
            break
    return found


def source_messages(project_id: uuid.UUID, memory: Memory) -> list[dict[str, Any]]:
    """Where a memory came from: the messages of its add request (each with `role`, `content`,
    `name` and `used`, true for the messages it was taken from), or for a message stored
    verbatim (infer=false, no request row) the message its ADD history row kept; [] if none."""
    if memory.source_event_id is None:
        return []
    history = MemoryHistory.objects.filter(
        project_id=project_id, memory_id=memory.id, event=MemoryHistory.Event.ADD
    )
    return sources_of(project_id, [memory], {memory.id: list(history)})[memory.id]


def sources_of(
    project_id: uuid.UUID,
    rows: Sequence[Memory],
    histories: dict[uuid.UUID, list[MemoryHistory]],
) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """source_messages for each of `rows`, their add requests read in one query; `histories`
    holds each memory's history rows (its ADD row keeps a verbatim message)."""
    wanted = {m.source_event_id for m in rows if m.source_event_id is not None}
    events = {
        event_id: (user_id, payload)
        for event_id, user_id, payload in MemoryEvent.objects.filter(
            project_id=project_id, pk__in=wanted
        ).values_list("id", "user_id", "payload")
    }
    found: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for memory in rows:
        if memory.source_event_id is None:
            found[memory.id] = []
            continue
        user_id, payload = events.get(memory.source_event_id, (None, None))
        if (
            user_id == memory.user_id
            and isinstance(payload, dict)
            and isinstance(payload.get("messages"), list)
        ):
            used = set(memory.source_positions)
            found[memory.id] = [
                {**message, "used": position in used}
                for position, message in enumerate(payload["messages"])
                if isinstance(message, dict)
            ]
        else:
            added = [r.input for r in histories.get(memory.id, []) if r.event == "ADD"]
            kept = added[0] if added else []
            found[memory.id] = [{**m, "used": True} for m in kept if isinstance(m, dict)]
    return found
