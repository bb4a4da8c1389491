"""What purge_expired reads: expired memories, the project's retention periods, and the
deleted memories due for erasure.

May import memory.queries.core, memory.models, tenants.models and Django settings.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.conf import settings

from memory.models import Memory, MemoryQuerySet
from memory.queries.core import memories
from tenants.models import Project


def expired(project_id: uuid.UUID, *, before: date) -> MemoryQuerySet:
    """Active memories whose expiration date is before `before`."""
    return memories(project_id).active().filter(expiration_date__lt=before)


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
