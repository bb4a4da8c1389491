"""Reads of an embedding switch (`manage.py reembed`): the recorded spaces, and the rows whose
vector in the space being built (`embedding_next`, memory.models.embedding) is still missing.

Each read of rows is one project's, in its tenant context (row-level security on).

May import memory.models and tenants.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from memory.models import EmbeddingSpace
from tenants.db import project_context
from tenants.models import Project


def space(state: str) -> EmbeddingSpace | None:
    """The space in `state` (current or building), if any."""
    return EmbeddingSpace.objects.filter(state=state).first()


def project_ids() -> list[uuid.UUID]:
    return list(Project.objects.order_by("pk").values_list("pk", flat=True))


@dataclass(frozen=True)
class Row:
    id: int | uuid.UUID
    text: str
    hash: str = ""  # a memory's: its vector is written only if the text is still this one


def missing_memories(project_id: uuid.UUID, limit: int) -> list[Row]:
    """Up to `limit` memories (of every state but redacted) without a vector in the space
    being built, by id."""
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, text, hash FROM memory_memory WHERE project_id = %s "
            "AND embedding_next IS NULL AND state <> 'redacted' ORDER BY id LIMIT %s",
            [project_id, limit],
        )
        return [Row(*row) for row in cursor.fetchall()]


def missing_entities(project_id: uuid.UUID, limit: int) -> list[Row]:
    """Up to `limit` entity names without a vector in the space being built, by id."""
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, entity_name FROM memory_entityvector WHERE project_id = %s "
            "AND embedding_next IS NULL ORDER BY id LIMIT %s",
            [project_id, limit],
        )
        return [Row(*row) for row in cursor.fetchall()]


def missing_count(project_id: uuid.UUID) -> int:
    """How many vectors the project still lacks in the space being built."""
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM memory_memory WHERE project_id = %s "
            "AND embedding_next IS NULL AND state <> 'redacted') + "
            "(SELECT count(*) FROM memory_entityvector WHERE project_id = %s "
            "AND embedding_next IS NULL)",
            [project_id, project_id],
        )
        (count,) = cursor.fetchone()
        return int(count)


def written_since(
    project_id: uuid.UUID,
    since: datetime,
    until: datetime | None,
    after: int | uuid.UUID | None,
    limit: int,
) -> tuple[list[Row], list[Row]]:
    """The memories and entity names whose vector was written from `since` (to `until`), by a
    process that may not yet have followed a switch; memories after the id `after`, by id."""
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, text, hash FROM memory_memory WHERE project_id = %s "
            "AND embedded_at >= %s AND (%s::timestamptz IS NULL OR embedded_at < %s) "
            "AND state <> 'redacted' AND (%s::uuid IS NULL OR id > %s) ORDER BY id LIMIT %s",
            [project_id, since, until, until, after, after, limit],
        )
        memories = [Row(*row) for row in cursor.fetchall()]
        cursor.execute(
            "SELECT id, entity_name FROM memory_entityvector WHERE project_id = %s "
            "AND embedded_at >= %s AND (%s::timestamptz IS NULL OR embedded_at < %s) ORDER BY id",
            [project_id, since, until, until],
        )
        entities = [Row(*row) for row in cursor.fetchall()]
    return memories, entities
