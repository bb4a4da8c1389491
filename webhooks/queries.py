"""Reads of webhooks and their deliveries, by project (the caller holds the tenant context)."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from webhooks.models import Delivery, Webhook

RECENT_DELIVERIES = 50


def webhooks(project_id: uuid.UUID) -> QuerySet[Webhook]:
    return Webhook.objects.filter(project_id=project_id).order_by("created_at", "id")


def webhook(project_id: uuid.UUID, webhook_id: int) -> Webhook | None:
    return Webhook.objects.filter(project_id=project_id, pk=webhook_id).first()


def recent_deliveries(project_id: uuid.UUID, limit: int = RECENT_DELIVERIES) -> list[Delivery]:
    """The project's latest deliveries, newest first, with their webhooks."""
    found = Delivery.objects.filter(project_id=project_id).select_related("webhook")
    return list(found.order_by("-created_at")[:limit])
