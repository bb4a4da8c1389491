"""One attempt at one delivery: claim it, render its body, sign it, POST it, record the outcome.

The attempt is counted when it is claimed, in a transaction of its own, so an attempt that
fails in any way (the worker killed mid-request included) still counts, and a delivery has at
most ENGRAM_WEBHOOK_MAX_ATTEMPTS: the job always ends. The POST is made outside any
transaction, within ENGRAM_WEBHOOK_TIMEOUT for the whole exchange (connect, send, status,
headers, the answer's first characters: config.outbound), no redirect followed, no proxy from
the environment, to an address checked just before (webhooks.addresses); of the answer, only
its status and the first RESPONSE_PREFIX_CHARS characters are kept.

Every attempt's outcome is recorded, a timeout as a failure: one the worker's time limit or
shutdown interrupts is recorded before the interruption goes on, and one whose worker died
(its lease ran out with no outcome) is recorded as failed when the delivery is next claimed.

Success is any 2xx. Anything else is a failed attempt: the delivery is tried again after an
exponential backoff with jitter, until its last attempt (then FAILED); the webhook counts
failed attempts in a row and is disabled at ENGRAM_WEBHOOK_DISABLE_AFTER, with the reason.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.utils import timezone

from config import metrics, tracing
from config.outbound import deadline_client
from tenants.db import project_context
from webhooks.addresses import UrlError, addresses
from webhooks.models import RESPONSE_PREFIX_CHARS, Delivery, Webhook
from webhooks.render import Dropped, render

BACKOFF_BASE_SECONDS = 30
BACKOFF_MAX_SECONDS = 3600
# A worker holds a claimed delivery this much longer than the POST may take.
LEASE_MARGIN_SECONDS = 30
USER_AGENT = "engram-webhooks/1"


@dataclass(frozen=True)
class Claimed:
    delivery_id: uuid.UUID
    project_id: uuid.UUID
    event_type: str
    url: str
    secret: str
    attempt: int


@dataclass(frozen=True)
class Outcome:
    status: int | None  # the receiver's HTTP status, if it answered
    error: str  # empty on success
    response: str  # the answer's first characters
    duration_ms: int

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def backoff(attempt: int) -> float:
    """Seconds before attempt `attempt` + 1: 30 s doubled each time, at most an hour, +-25 %."""
    base = min(BACKOFF_BASE_SECONDS * 2 ** (attempt - 1), BACKOFF_MAX_SECONDS)
    return float(base) * random.uniform(0.75, 1.25)  # noqa: S311 - spreading retries, not security


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The Engram-Signature header: HMAC-SHA256 over "<timestamp>.<body>" with the secret."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def attempt(delivery_id: uuid.UUID, project_id: uuid.UUID) -> float | None:
    """Make one attempt; the seconds until the next one, or None when there is none to make
    by this message (delivered, failed for good, dropped, or not this worker's)."""
    claimed = claim(delivery_id, project_id)
    if claimed is None:
        return None
    try:
        with project_context(project_id):
            delivery = Delivery.objects.get(pk=delivery_id)
            body = render(delivery)
        if isinstance(body, Dropped):
            drop(claimed, body.reason)
            return None
        with tracing.span("webhook.delivery", {"engram.attempt": claimed.attempt}) as span:
            outcome = post(claimed, body)
            if span is not None and outcome.status is not None:
                span.set_attribute("http.response.status_code", outcome.status)
    except Exception as exc:  # any failure is this attempt's, recorded: the job ends
        outcome = Outcome(None, f"{type(exc).__name__}: {exc}"[:500], "", 0)
    except BaseException as exc:  # the worker's time limit or shutdown: recorded, then let go
        record(claimed, Outcome(None, f"interrupted: {type(exc).__name__}"[:500], "", 0))
        raise
    return record(claimed, outcome)


def claim(delivery_id: uuid.UUID, project_id: uuid.UUID) -> Claimed | None:
    """Take the delivery for one attempt and count it, or None if it is not to be tried now:
    done, held by another worker, not due, or its webhook disabled (it waits, PENDING)."""
    now = timezone.now()
    with project_context(project_id):
        delivery = (
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("webhook")
            .filter(pk=delivery_id, project_id=project_id)
            .first()
        )
        if delivery is None or delivery.status != Delivery.Status.PENDING:
            return None
        webhook = delivery.webhook
        held = delivery.lease_until is not None and delivery.lease_until > now
        if held or delivery.next_attempt_at > now + timedelta(seconds=1) or not webhook.enabled:
            return None
        if delivery.lease_until is not None:  # the last attempt's worker died mid-attempt
            webhook = _lost_attempt(delivery, now)
            if not webhook.enabled:
                return None
        if delivery.attempts >= settings.ENGRAM_WEBHOOK_MAX_ATTEMPTS:
            _finish(delivery, Delivery.Status.FAILED, "no attempts left", now)
            return None
        delivery.attempts += 1
        delivery.lease_until = now + timedelta(
            seconds=settings.ENGRAM_WEBHOOK_TIMEOUT + LEASE_MARGIN_SECONDS
        )
        delivery.save(update_fields=["attempts", "lease_until"])
        return Claimed(
            delivery.id, project_id, delivery.event_type, webhook.url, webhook.secret,
            delivery.attempts,
        )  # fmt: skip


def _lost_attempt(delivery: Delivery, now: datetime) -> Webhook:
    """Record the attempt a dead worker claimed and never finished, as a failed one; the
    webhook, locked, as that leaves it (disabled at ENGRAM_WEBHOOK_DISABLE_AFTER)."""
    webhook = Webhook.objects.select_for_update().get(pk=delivery.webhook_id)
    lost = Outcome(
        None, f"attempt {delivery.attempts} ended with its worker (lease expired)", "", 0
    )
    delivery.last_status, delivery.last_error, delivery.lease_until = None, lost.error, None
    delivery.save(update_fields=["last_status", "last_error", "lease_until"])
    webhook.consecutive_failures += 1
    _maybe_disable(webhook, lost, now)
    webhook.save(
        update_fields=["consecutive_failures", "enabled", "disabled_at", "disabled_reason"]
    )
    return webhook


def _finish(delivery: Delivery, status: str, error: str, now: datetime) -> None:
    Delivery.objects.filter(pk=delivery.pk).update(
        status=status, last_error=error, completed_at=now, lease_until=None
    )
    metrics.after_commit(metrics.WEBHOOK_DELIVERIES.labels(outcome=status.lower()).inc)


def drop(claimed: Claimed, reason: str) -> None:
    with project_context(claimed.project_id):
        Delivery.objects.filter(pk=claimed.delivery_id).update(
            status=Delivery.Status.DROPPED,
            last_error=reason,
            completed_at=timezone.now(),
            lease_until=None,
        )
        metrics.after_commit(metrics.WEBHOOK_DELIVERIES.labels(outcome="dropped").inc)


def post(claimed: Claimed, body: bytes) -> Outcome:
    """POST the signed body to the webhook's URL, at an address checked now, the whole exchange
    (every address tried, the answer's status, headers and first characters) within
    ENGRAM_WEBHOOK_TIMEOUT (config.outbound)."""
    started = time.monotonic()
    timeout = settings.ENGRAM_WEBHOOK_TIMEOUT
    try:
        checked = addresses(claimed.url)
    except UrlError as exc:
        return Outcome(None, str(exc), "", 0)
    timestamp = int(time.time())
    url = httpx.URL(claimed.url)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Host": url.netloc.decode("ascii"),
        "Engram-Event": claimed.event_type,
        "Engram-Delivery": str(claimed.delivery_id),
        "Engram-Signature": sign(claimed.secret, timestamp, body),
    }
    # Connect to a checked address (the next one if it refuses: an IPv6 address first on a
    # machine without IPv6); TLS still names and verifies the URL's host.
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    error = ""
    with deadline_client(timeout) as client:
        for address in checked:
            request = client.build_request(
                "POST", url.copy_with(host=address), content=body, headers=headers,
                extensions=extensions,
            )  # fmt: skip
            try:
                response = client.send(request, stream=True)
                try:
                    prefix, status = _prefix(response), response.status_code
                finally:
                    response.close()
            except httpx.ConnectError as exc:
                error = f"{type(exc).__name__}: {exc}"[:500]
                continue
            except httpx.HTTPError as exc:
                return Outcome(None, f"{type(exc).__name__}: {exc}"[:500], "", _ms(started))
            refusal = "" if 200 <= status < 300 else _refusal(status)
            return Outcome(status, refusal, prefix, _ms(started))
    return Outcome(None, error, "", _ms(started))


def _refusal(status: int) -> str:
    if 300 <= status < 400:
        return f"the receiver answered {status}, a redirect (not followed)"
    return f"the receiver answered {status}"


def _prefix(response: httpx.Response) -> str:
    """The answer's first characters (the rest is not read)."""
    data = b""
    for chunk in response.iter_bytes(1024):
        data += chunk
        if len(data) >= RESPONSE_PREFIX_CHARS * 4:
            break
    return data.decode("utf-8", "replace")[:RESPONSE_PREFIX_CHARS]


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def record(claimed: Claimed, outcome: Outcome) -> float | None:
    """Write the attempt's outcome; the seconds until the next attempt, or None."""
    now = timezone.now()
    with project_context(claimed.project_id):
        delivery = Delivery.objects.select_for_update().filter(pk=claimed.delivery_id).first()
        if delivery is None:
            return None  # deleted with its webhook meanwhile
        webhook = Webhook.objects.select_for_update().get(pk=delivery.webhook_id)
        delivery.last_status, delivery.last_error = outcome.status, outcome.error
        delivery.last_response, delivery.last_duration_ms = outcome.response, outcome.duration_ms
        delivery.lease_until = None
        delay = None
        if outcome.ok:
            delivery.status, delivery.completed_at = Delivery.Status.DELIVERED, now
            webhook.consecutive_failures = 0
        else:
            webhook.consecutive_failures += 1
            _maybe_disable(webhook, outcome, now)
            if delivery.attempts >= settings.ENGRAM_WEBHOOK_MAX_ATTEMPTS:
                delivery.status, delivery.completed_at = Delivery.Status.FAILED, now
            else:
                delay = backoff(delivery.attempts)
                delivery.next_attempt_at = now + timedelta(seconds=delay)
        delivery.save()
        webhook.save(
            update_fields=["consecutive_failures", "enabled", "disabled_at", "disabled_reason"]
        )
        verdict = "delivered" if outcome.ok else "retrying" if delay is not None else "failed"
        metrics.after_commit(metrics.WEBHOOK_DELIVERIES.labels(outcome=verdict).inc)
    return delay


def _maybe_disable(webhook: Webhook, outcome: Outcome, now: datetime) -> None:
    limit = settings.ENGRAM_WEBHOOK_DISABLE_AFTER
    if webhook.enabled and webhook.consecutive_failures >= limit:
        webhook.enabled, webhook.disabled_at = False, now
        webhook.disabled_reason = (
            f"disabled after {webhook.consecutive_failures} failed attempts in a row "
            f"(ENGRAM_WEBHOOK_DISABLE_AFTER={limit}); the last: {outcome.error}"
        )[:1000]
