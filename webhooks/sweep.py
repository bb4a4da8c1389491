"""Deliveries no queue message will bring to a worker any more, sent again.

A PENDING delivery of an enabled webhook is stranded when it has been due for a while and no
worker holds it (no lease, or an expired one: its worker died), and dramatiq-postgres's queue
holds no deliver_webhook message for it (a send lost, a message that failed outright). The
queue table is asked at the moment of sending, as memory.extraction.sweep does for events.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from memory import jobs
from tenants.db import project_context
from tenants.models import Project
from webhooks.models import Delivery

LOCK = "engram.sweep_webhooks"


def sweep(due_for: timedelta) -> int:
    """Send each stranded delivery once; how many were sent (0 if another sweep runs)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", [LOCK])
        row = cursor.fetchone()
        if not (row and row[0]):
            return 0
        stranded = stranded_deliveries(timezone.now(), due_for)
        for delivery_id, project_id in stranded:
            jobs.DELIVER_WEBHOOK.send(delivery_id, project_id)
    return len(stranded)


def stranded_deliveries(now: datetime, due_for: timedelta) -> list[tuple[str, str]]:
    """(delivery id, project id) of PENDING deliveries of enabled webhooks, due for longer
    than `due_for`, not held by a worker, and without a message in the queue."""
    found: list[tuple[str, str]] = []
    for project_id in Project.objects.values_list("pk", flat=True):
        with project_context(project_id):
            stranded = Delivery.objects.filter(
                Q(lease_until__isnull=True) | Q(lease_until__lt=now),
                project_id=project_id,
                status=Delivery.Status.PENDING,
                webhook__enabled=True,
                next_attempt_at__lt=now - due_for,
            ).values_list("pk", flat=True)
            found += [(str(pk), str(project_id)) for pk in stranded]
    queued = in_queue([delivery_id for delivery_id, _ in found])
    return [(d, p) for d, p in found if d not in queued]


def in_queue(delivery_ids: list[str]) -> set[str]:
    """Those of `delivery_ids` with a deliver_webhook message queued, delayed or held."""
    if not delivery_ids:
        return set()
    # The queue's index on the first argument (memory migration 0009) serves this.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT message->'args'->>0 FROM dramatiq.queue "
            "WHERE message->>'actor_name' = %s AND message->'args'->>0 = ANY(%s) "
            "AND state IN ('queued', 'consumed')",
            [jobs.DELIVER_WEBHOOK.actor_name, delivery_ids],
        )
        return {row[0] for row in cursor.fetchall()}
