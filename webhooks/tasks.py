"""The webhook delivery actor: thin, takes ids, safe to run twice (webhooks.delivery)."""

from __future__ import annotations

import uuid

import dramatiq
from django.conf import settings

from memory import jobs
from webhooks import delivery


def _retry_when(retries: int, exception: BaseException) -> bool:
    """Re-queue only when the actor asked (the delivery row counts and bounds the attempts)."""
    return isinstance(exception, dramatiq.Retry)


@dramatiq.actor(
    actor_name=jobs.DELIVER_WEBHOOK.actor_name,
    queue_name=jobs.DELIVER_WEBHOOK.queue_name,
    retry_when=_retry_when,
    # An attempt's exchange ends within ENGRAM_WEBHOOK_TIMEOUT (webhooks.delivery.post); the
    # limit is a backstop past it, for the database work around it, as the claim's lease is.
    time_limit=(settings.ENGRAM_WEBHOOK_TIMEOUT + delivery.LEASE_MARGIN_SECONDS) * 1000,
)
def deliver_webhook(delivery_id: str, project_id: str) -> None:
    """One attempt at a delivery; a failed one that may be tried again raises Retry with the
    backoff as its delay, which puts this same message back on the queue. Anything else ends
    the message: a claimed attempt is counted, so the sweeper's re-sends end too."""
    try:
        delivery_uuid, project_uuid = uuid.UUID(delivery_id), uuid.UUID(project_id)
    except (TypeError, ValueError, AttributeError):
        return
    delay = delivery.attempt(delivery_uuid, project_uuid)
    if delay is not None:
        raise dramatiq.Retry(
            f"webhook delivery {delivery_id}: next attempt", delay=int(delay * 1000)
        )
