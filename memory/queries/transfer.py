"""Reading a whole project out as the records of a project file (export_project).

One repeatable-read snapshot when the caller has no transaction open (the header's counts and
every record agree even while the project is written to), in the project's tenant context; rows
are read through server-side cursors page by page, never the whole project at once. The records,
their order and their fields are memory.transfer_format's; docs/moving.md describes them.

May import memory.models, memory.graph, memory.transfer_format, tenants and config.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet

from memory.graph.transfer import count_graph, dump_entities, dump_relations
from memory.models import (
    EntityVector,
    Feedback,
    Memory,
    MemoryEntity,
    MemoryEvent,
    MemoryHistory,
    ScopeSummary,
)
from memory.text.embeddings import active_space
from memory.transfer_format import (
    END,
    ENTITY,
    ENTITY_LINK,
    ENTITY_VECTOR,
    EVENT,
    FEEDBACK,
    FORMAT,
    HISTORY,
    MEMORY,
    RECORD_TYPES,
    RELATION,
    SUMMARY,
    VECTOR_ENCODING,
    VERSION,
    record_of,
)
from tenants.db import project_context
from tenants.models import Project

CHUNK = 500

# Memories from the end of each supersession chain back to its start: a memory comes after the
# one that replaced it, so an import meets replaced_by's target first.
_MEMORY_ORDER = """
WITH RECURSIVE chain(id, depth) AS (
    SELECT id, 0 FROM memory_memory WHERE project_id = %(project)s AND replaced_by_id IS NULL
    UNION ALL
    SELECT m.id, chain.depth + 1 FROM memory_memory m JOIN chain ON m.replaced_by_id = chain.id
    WHERE m.project_id = %(project)s
)
SELECT id FROM chain ORDER BY depth, id
"""


def present_memory_ids(project_id: uuid.UUID, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Those of `ids` that are memories of the project already (an import skips them before
    it fetches or embeds anything for them)."""
    with project_context(project_id):
        found = Memory.objects.filter(project_id=project_id, pk__in=ids)
        return set(found.values_list("pk", flat=True))


def embedding_model() -> str:
    """The name of this instance's embedding model (its current embedding space): vectors of
    the same name are the same."""
    return active_space(fresh=True).name


def embedding_dimensions() -> int:
    """The dimension of this instance's vectors (its current embedding space)."""
    return active_space(fresh=True).dimensions


def engram_version() -> str:
    try:
        return version("engram")
    except PackageNotFoundError:
        return "unknown"


def export_records(project: Project) -> Iterator[dict[str, Any]]:
    """The header, every record of the project in the file's order, and the end record."""
    snapshot = not connection.in_atomic_block
    with transaction.atomic():
        if snapshot:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with project_context(project.pk):
            counts = _counts(project.pk)
            yield header(project, counts)
            yield from _records(project.pk)
            yield {"type": END, "counts": counts}


def header(project: Project, counts: dict[str, int]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "engram_version": engram_version(),
        "exported_at": datetime.now(UTC).isoformat(),
        "project": {
            "id": str(project.pk),
            "name": project.name,
            "organization": project.organization.name,
            "description": project.description,
            "custom_instructions": project.custom_instructions,
            "custom_categories": project.custom_categories,
            "includes": project.includes,
            "excludes": project.excludes,
            "deleted_retention_days": project.deleted_retention_days,
            "event_retention_days": project.event_retention_days,
        },
        "embedding": {
            "model": embedding_model(),
            "dimensions": embedding_dimensions(),
            "encoding": VECTOR_ENCODING,
        },
        "counts": counts,
    }


def _querysets(project_id: uuid.UUID) -> dict[str, QuerySet[Any]]:
    return {
        EVENT: MemoryEvent.objects.filter(project_id=project_id).order_by("created_at", "id"),
        HISTORY: MemoryHistory.objects.filter(project_id=project_id).order_by("created_at", "id"),
        FEEDBACK: Feedback.objects.filter(project_id=project_id).order_by("created_at", "id"),
        SUMMARY: ScopeSummary.objects.filter(project_id=project_id).order_by("id"),
        ENTITY_LINK: MemoryEntity.objects.filter(project_id=project_id).order_by("id"),
        ENTITY_VECTOR: EntityVector.objects.filter(project_id=project_id).order_by("id"),
    }


def _counts(project_id: uuid.UUID) -> dict[str, int]:
    entities, relations = count_graph(project_id)
    counts = {ENTITY: entities, RELATION: relations}
    counts[MEMORY] = Memory.objects.filter(project_id=project_id).count()
    counts |= {kind: qs.count() for kind, qs in _querysets(project_id).items()}
    return {kind: counts[kind] for kind in RECORD_TYPES}


def _records(project_id: uuid.UUID) -> Iterator[dict[str, Any]]:
    for vertex_id, properties in dump_entities(project_id):
        yield {"type": ENTITY, "id": vertex_id, "properties": properties}
    for edge_id, start, end, properties in dump_relations(project_id):
        yield {
            "type": RELATION,
            "id": edge_id,
            "start": start,
            "end": end,
            "properties": properties,
        }
    querysets = _querysets(project_id)
    yield from (record_of(EVENT, row) for row in querysets[EVENT].iterator(CHUNK))
    yield from _memories(project_id)
    for kind in (HISTORY, FEEDBACK, SUMMARY, ENTITY_LINK, ENTITY_VECTOR):
        yield from (record_of(kind, row) for row in querysets[kind].iterator(CHUNK))


def _memories(project_id: uuid.UUID) -> Iterator[dict[str, Any]]:
    with connection.chunked_cursor() as cursor:
        cursor.execute(_MEMORY_ORDER, {"project": project_id})
        while ids := [row[0] for row in cursor.fetchmany(CHUNK)]:
            rows = Memory.objects.filter(project_id=project_id, pk__in=ids).in_bulk()
            yield from (record_of(MEMORY, rows[i]) for i in ids if i in rows)
