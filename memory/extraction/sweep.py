"""Finding add requests that no queue message will deliver any more, and sending them again.

An event is stale when it stayed PENDING longer than a while, or is RUNNING under an expired
lease (its worker died). It is re-sent only if dramatiq-postgres's queue holds no message for
it, which is asked of the queue table itself (see the sweep_events command for why).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from memory.extraction.broker import SCHEMA
from memory.extraction.tasks import process_event
from memory.models import MemoryEvent
from tenants.db import project_context
from tenants.models import Project

LOCK = "engram.sweep_events"


def sweep(pending_for: timedelta) -> int:
    """Send each stale event once; return how many were sent (0 if another sweep is running)."""
    with transaction.atomic(), connection.cursor() as cursor:
        # Held until this transaction ends, after the sends (committed by the broker's own
        # connection), so the next sweep finds their messages.
        cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", [LOCK])
        row = cursor.fetchone()
        if not (row and row[0]):
            return 0
        stale = stale_events(timezone.now(), pending_for)
        for event_id, project_id in stale:
            process_event.send(event_id, project_id)
    return len(stale)


def stale_events(now: datetime, pending_for: timedelta) -> list[tuple[str, str]]:
    """(event id, project id) of unfinished events that no queue message will deliver any more.

    PENDING for longer than `pending_for`, or RUNNING under an expired lease, and without a
    message queued, delayed or held by a worker (see the sweep_events command).
    """
    found = []
    for project_id in Project.objects.values_list("pk", flat=True):
        with project_context(project_id):
            stale = MemoryEvent.objects.filter(
                Q(status=MemoryEvent.Status.PENDING, created_at__lt=now - pending_for)
                | Q(status=MemoryEvent.Status.RUNNING, lease_until__lt=now)
            ).values_list("pk", flat=True)
            found += [(str(pk), str(project_id)) for pk in stale]
    in_queue = events_in_queue([event_id for event_id, _ in found])
    return [(event_id, project_id) for event_id, project_id in found if event_id not in in_queue]


def events_in_queue(event_ids: Sequence[str]) -> set[str]:
    """Those of `event_ids` that have a process_event message in dramatiq-postgres's queue table.

    'queued' covers messages waiting, due or delayed (a delayed one waits in the queue's ".DQ"
    twin until its available_at); 'consumed' ones are held by a worker, and go back to 'queued'
    if that worker dies (the broker's reaper). Acknowledged messages are deleted; 'rejected'
    ones are dead.

    A message a worker has held for longer than an event's lease (ENGRAM_EVENT_LEASE_SECONDS)
    counts as none: a worker that lost its database mid-message (a failover) could neither
    record the attempt nor acknowledge the message, and, alive, keeps holding it; the event
    would wait for that worker's restart. Sent again, it is claimed like any retry (a worker that
    did still hold it for a long backlog finds it done, or held, and drops it).
    """
    if not event_ids:
        return set()
    # Served by the index of migration 0009 (same expressions).
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT message->'args'->>0 FROM {SCHEMA}.queue "  # noqa: S608 - a constant
            "WHERE message->>'actor_name' = %s AND message->'args'->>0 = ANY(%s) "
            "AND (state = 'queued' OR (state = 'consumed' AND (consumed_at IS NULL "
            "OR consumed_at > now() - make_interval(secs => %s))))",
            [process_event.actor_name, list(event_ids), settings.ENGRAM_EVENT_LEASE_SECONDS],
        )
        return {row[0] for row in cursor.fetchall()}
