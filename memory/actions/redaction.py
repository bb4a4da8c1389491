"""Redaction of a memory and retention purges (of deleted memories, of old add requests'
payloads): calls of the database functions engram_erase_memories and engram_purge_events.

May import memory.actions.common, memory.actions._shared and memory.actions.erasure,
memory.graph, memory.models, tenants and Django.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection

from memory import graph
from memory.actions._shared import _as_actor
from memory.actions.common import Actor, hold_user
from memory.actions.erasure import erasure_subject_hash
from memory.models import Memory
from tenants.db import project_context

# -- Redaction and retention (audit migration 0012: engram_erase_memories, engram_purge_events)

# The stores engram_erase_memories reports on, in the order they are listed.
MEMORY_ERASURE_STORES = (
    "memories",
    "feedback",
    "entity_links",
    "graph_entities",
    "graph_relations",
    "history",
    "contexts",
    "summaries",
    "events",
    "exports",
    "idempotency",
)


def _erase_memories(
    project_id: uuid.UUID,
    memory_ids: Sequence[uuid.UUID],
    *,
    redact: bool,
    subject: tuple[str, str],
    actor: Actor,
    reason: str = "",
    dry_run: bool = False,
) -> dict[str, int]:
    """One call of engram_erase_memories in the project's tenant context (see the migration)."""
    kind, subject_id = subject
    with project_context(project_id), connection.cursor() as cursor:
        if not dry_run:
            # Valid edges only these memories backed become invalid first, as for a delete.
            graph.retract_memories(project_id, memory_ids)
        cursor.execute(
            "SELECT engram_erase_memories(%s, %s::uuid[], %s, %s, %s, %s, %s, %s)",
            [
                project_id,
                list(memory_ids),
                redact,
                kind,
                erasure_subject_hash(project_id, kind, subject_id),
                str(actor),
                reason,
                dry_run,
            ],
        )
        return _counts(cursor.fetchone(), MEMORY_ERASURE_STORES)


def _counts(row: Any, stores: Sequence[str]) -> dict[str, int]:
    counts = row[0] if row else {}
    if isinstance(counts, str):  # Django leaves jsonb undecoded outside a JSONField
        counts = json.loads(counts)
    ordered = sorted(counts, key=lambda s: stores.index(s) if s in stores else len(stores))
    return {store: int(counts[store]) for store in ordered}


def do_redact_memory(
    memory: Memory, *, actor: Actor | str, reason: str = "", dry_run: bool = False
) -> dict[str, int]:
    """Remove a memory's text for good from every store, keeping its skeleton (GDPR).

    A legal removal: allowed for any memory, immutable, superseded or deleted included. The
    memory becomes `redacted` (text "[redacted]", zero vector, no metadata; never listed,
    searched, changed or restored); its history rows keep who and when with the text blanked,
    and a REDACT row (actor, `reason`) is added; the add requests that carried it lose their
    messages' contents and its text in their results; feedback reasons, entity links, graph
    edges only it backed (and entities left without edges or links), the scope's running
    summary and its text in exports go. One purge record (counts, no text). Returns the rows
    per store; a second redaction counts nothing. `dry_run` counts only.
    """
    who = _as_actor(actor)
    with project_context(memory.project_id):
        hold_user(memory.project_id, memory.user_id, exclusive=True)
        return _erase_memories(
            memory.project_id,
            [memory.pk],
            redact=True,
            subject=("memory", str(memory.pk)),
            actor=who,
            reason=reason,
            dry_run=dry_run,
        )


# Memories erased per call of the database function (one transaction each).
RETENTION_CHUNK = 500


def do_purge_memories(
    project_id: uuid.UUID,
    memory_ids: Sequence[uuid.UUID],
    *,
    actor: Actor | str,
    dry_run: bool = False,
) -> dict[str, int]:
    """Erase these memories for good (purge_expired: deleted longer ago than the retention
    period): the rows, their history and feedback, and their text wherever it was copied, as
    redaction does. One transaction and, when it erased something, one purge record."""
    if not memory_ids:
        return {}
    ids = sorted(memory_ids)
    subject = ("retention", ",".join(str(i) for i in ids))
    return _erase_memories(
        project_id, ids, redact=False, subject=subject, actor=_as_actor(actor), dry_run=dry_run
    )


def do_purge_event_payloads(
    project_id: uuid.UUID, *, before: datetime, actor: Actor | str, dry_run: bool = False
) -> dict[str, int]:
    """Blank the messages, metadata, results and graph summary of the project's finished add
    requests created before `before` (and the messages their history rows quote); the rows
    stay, with status, usage and timings. One purge record when it blanked something."""
    subject = erasure_subject_hash(project_id, "retention", before.isoformat())
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT engram_purge_events(%s, %s, %s, %s, %s)",
            [project_id, before, subject, str(_as_actor(actor)), dry_run],
        )
        return _counts(cursor.fetchone(), ("events", "history"))
