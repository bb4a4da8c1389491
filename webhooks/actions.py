"""The only writers of webhooks: create, change, delete, re-enable, rotate the secret.

Each runs in the caller's tenant transaction (tenants.db.project_context; a savepoint when
nested) and checks the URL (webhooks.addresses) before anything is written.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from memory import jobs
from tenants.db import project_context
from tenants.models import ApiKey, Project
from webhooks.addresses import check_webhook_url
from webhooks.models import EVENT_TYPES, Delivery, Webhook

MAX_WEBHOOKS_PER_PROJECT = 20
SECRET_PREFIX = "whsec_"  # noqa: S105 - the prefix of generated secrets


class WebhookError(ValueError):
    """A webhook that cannot be made or changed as asked (the API's 400)."""


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def _event_types(values: Sequence[str]) -> list[str]:
    unknown = [v for v in values if v not in EVENT_TYPES]
    if unknown:
        raise WebhookError(
            f"event_types: unknown event type {unknown[0]!r}; known: {', '.join(EVENT_TYPES)}."
        )
    if not values:
        raise WebhookError("event_types: give at least one event type.")
    return list(dict.fromkeys(values))


def do_create_webhook(
    project_id: uuid.UUID,
    *,
    name: str,
    url: str,
    event_types: Sequence[str],
    created_by_key: ApiKey | None = None,
) -> Webhook:
    """A new, enabled webhook with a fresh secret (the caller shows the secret once). Made
    through the API, it records the key: revoking that key disables it (migration 0002)."""
    types = _event_types(event_types)
    check_webhook_url(url)
    with project_context(project_id):
        # One create at a time per project, or two could each count 19 and store 21. FOR NO
        # KEY UPDATE: it does not wait for, nor hold up, writes of rows that refer to the
        # project (their foreign key check takes KEY SHARE), only another create's lock.
        Project.objects.select_for_update(no_key=True).only("pk").get(pk=project_id)
        if Webhook.objects.filter(project_id=project_id).count() >= MAX_WEBHOOKS_PER_PROJECT:
            raise WebhookError(f"a project has at most {MAX_WEBHOOKS_PER_PROJECT} webhooks.")
        return Webhook.objects.create(
            project_id=project_id,
            name=name,
            url=url,
            event_types=types,
            secret=new_secret(),
            created_by_key=created_by_key,
        )


def do_update_webhook(webhook: Webhook, **changes: Any) -> Webhook:
    """Change name, url, event_types and (is_active) enabled; the URL is checked again."""
    fields = []
    if "event_types" in changes:
        webhook.event_types = _event_types(changes["event_types"])
        fields.append("event_types")
    if "url" in changes:
        webhook.url = check_webhook_url(changes["url"])
        fields.append("url")
    if "name" in changes:
        webhook.name = changes["name"]
        fields.append("name")
    with project_context(webhook.project_id):
        if fields:
            webhook.save(update_fields=[*fields, "updated_at"])
        if changes.get("is_active") is True:
            do_enable_webhook(webhook)
        elif changes.get("is_active") is False:
            _disable(webhook, "disabled through the API")
    return webhook


def do_delete_webhook(webhook: Webhook) -> None:
    """Delete the webhook and its deliveries (pending ones are not sent)."""
    with project_context(webhook.project_id):
        Webhook.objects.filter(pk=webhook.pk).delete()


def do_enable_webhook(webhook: Webhook) -> int:
    """Enable the webhook again, its failure count reset; its pending deliveries are sent now
    (after the commit). Returns how many."""
    with project_context(webhook.project_id):
        now = timezone.now()
        Webhook.objects.filter(pk=webhook.pk).update(
            enabled=True, disabled_at=None, disabled_reason="", consecutive_failures=0,
            updated_at=now,
        )  # fmt: skip
        webhook.enabled, webhook.disabled_at, webhook.disabled_reason = True, None, ""
        webhook.consecutive_failures = 0
        pending = Delivery.objects.filter(webhook=webhook, status=Delivery.Status.PENDING)
        pending.update(next_attempt_at=now, lease_until=None)
        args = [(str(d), str(webhook.project_id)) for d in pending.values_list("pk", flat=True)]
        # A lost send is repaired by the sweeper (sweep_events), the delivery being due.
        transaction.on_commit(lambda: _send_all(args), robust=True)
    return len(args)


def _send_all(args: list[tuple[str, str]]) -> None:
    for delivery_id, project_id in args:
        jobs.DELIVER_WEBHOOK.send(delivery_id, project_id)


def _disable(webhook: Webhook, reason: str) -> None:
    now = timezone.now()
    Webhook.objects.filter(pk=webhook.pk, enabled=True).update(
        enabled=False, disabled_at=now, disabled_reason=reason, updated_at=now
    )
    webhook.refresh_from_db()


def do_rotate_secret(webhook: Webhook) -> str:
    """A new secret for the webhook, from its next attempt on; returns it (shown once)."""
    secret = new_secret()
    with project_context(webhook.project_id):
        Webhook.objects.filter(pk=webhook.pk).update(secret=secret, updated_at=timezone.now())
    webhook.secret = secret
    return secret


def do_prune_deliveries(project_id: uuid.UUID, *, before: Any, dry_run: bool = False) -> int:
    """Delete the project's finished deliveries (delivered, failed, dropped) made before
    `before`: the delivery log is kept as long as the add requests' messages are
    (purge_expired, the project's event retention). Pending ones are never pruned. Returns
    how many (would) go."""
    with project_context(project_id):
        finished = Delivery.objects.filter(project_id=project_id, created_at__lt=before).exclude(
            status=Delivery.Status.PENDING
        )
        if dry_run:
            return finished.count()
        deleted, _ = finished.delete()
        return deleted
