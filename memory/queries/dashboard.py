"""The dashboards' reads (memory.web): scope ids with their counts, the memory browser, a
memory in any state, one end user's own memories, and where a memory came from.

May import memory.queries.core, memory.models and Django.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

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
