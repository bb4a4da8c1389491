"""An event's claim: taking it, keeping its lease, and recording how an attempt ended.

- `claim` takes the event in a transaction of its own, committed before any other work
  (status RUNNING, attempts + 1, a lease, a fresh claim token), so every attempt counts, however
  it ends. An event whose attempts are used up is FAILED there instead of run again.
- `renew` extends the lease before each step; `held_by` is the event while this claim holds it.
- `release` records a failed attempt: one that can never succeed (`PERMANENT`) fails the event
  at once, any other one puts it back to PENDING, until ENGRAM_EVENT_MAX_ATTEMPTS; `mark_failed`
  fails it for good. Both write only under the worker's own claim token (else nothing:
  `LostClaimError` for a step that finds it gone).
- `Run`: what one run of a claimed event carries from step to step.

May import memory.models, tenants, config, llm.types and llm.waits; nothing else of extraction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DataError
from django.db.models import Q, QuerySet
from django.utils import timezone

from config import metrics
from config.exceptions import switching_embeddings
from memory.extraction.llm.types import Usage
from memory.extraction.llm.waits import refused_for_good
from memory.models import MemoryEvent
from tenants.db import project_context

# Failures that a retry cannot cure: the same payload through the same code raises them again
# (a malformed payload, a timestamp or date out of range, a value the database refuses, a bug).
# The event fails at once instead of spending its attempts. Anything else (model rate limits,
# 5xx and timeouts, OperationalError, StaleDecisionError, ...) is retried with backoff.
PERMANENT: tuple[type[Exception], ...] = (
    ValueError,  # also UnicodeError, and pydantic's and JSON's decoding errors
    LookupError,  # KeyError, IndexError
    TypeError,
    AttributeError,
    ArithmeticError,  # OverflowError, ZeroDivisionError
    DataError,
    ValidationError,
)


def permanent(failure: Exception) -> bool:
    """Whether a retry cannot cure `failure`: PERMANENT, or the model API's refusal of the
    request itself (llm.waits); but not a vector of another embedding model, met while the
    deployment switches models (config.exceptions): the next attempt embeds with the new one."""
    if isinstance(failure, DataError) and switching_embeddings(failure):
        return False
    return isinstance(failure, PERMANENT) or refused_for_good(failure)


class LostClaimError(RuntimeError):
    """The event is no longer RUNNING under this worker's claim.

    Its lease ran out and another worker claimed it, or it was finished meanwhile: the worker
    drops it without writing to it.
    """


@dataclass(frozen=True)
class Claim:
    event_id: uuid.UUID
    project_id: uuid.UUID
    token: uuid.UUID


@dataclass
class Run:
    claim: Claim
    scope: dict[str, Any]
    started: float
    usage: Usage
    extractor: str = ""


def claim(event_id: uuid.UUID, project_id: uuid.UUID) -> Claim | None:
    """Take the event if it is pending, or running under an expired lease (its worker died).

    Committed on its own (a worker calls it outside any transaction), before any other work,
    so that the attempt counts whatever happens next. An event whose attempts are used up is
    FAILED instead.
    """
    now = timezone.now()
    claimable = Q(status=MemoryEvent.Status.PENDING) | Q(
        status=MemoryEvent.Status.RUNNING, lease_until__lt=now
    )
    with project_context(project_id):
        # Two workers racing: the second waits for the first's lock, then no longer matches.
        event = MemoryEvent.objects.select_for_update().filter(claimable, pk=event_id).first()
        if event is None:
            return None
        if event.attempts >= settings.ENGRAM_EVENT_MAX_ATTEMPTS:
            # Its last worker died (or hit the time limit) before it could record a failure.
            died = f"the worker stopped without finishing (lease expired), attempt {event.attempts}"
            _finish(
                event,
                MemoryEvent.Status.FAILED,
                f"{died}; before: {event.error}" if event.error else died,
            )
            return None
        event.status, event.attempts, event.claim_id = (
            MemoryEvent.Status.RUNNING,
            event.attempts + 1,
            uuid.uuid4(),
        )
        event.lease_until, event.started_at = now + _lease(), now
        event.save(update_fields=["status", "attempts", "claim_id", "lease_until", "started_at"])
    return Claim(event_id, project_id, event.claim_id)


def _lease() -> timedelta:
    return timedelta(seconds=settings.ENGRAM_EVENT_LEASE_SECONDS)


def held_by(claimed: Claim) -> QuerySet[MemoryEvent]:
    """The event, if it is still RUNNING under this claim (zero or one row)."""
    return MemoryEvent.objects.filter(
        pk=claimed.event_id, status=MemoryEvent.Status.RUNNING, claim_id=claimed.token
    )


def renew(claimed: Claim) -> None:
    """Extend the lease of a claim still held (before each step); else raise LostClaimError."""
    with project_context(claimed.project_id):
        held = held_by(claimed).update(lease_until=timezone.now() + _lease())
    if not held:
        raise LostClaimError(f"event {claimed.event_id} is no longer held by this claim")


def mark_failed(claimed: Claim, error: str, usage: Usage | None = None) -> bool:
    """FAILED for good, if the event is still held by this claim (else False, nothing written),
    with what the model calls cost."""
    with project_context(claimed.project_id):
        event = held_by(claimed).select_for_update().first()
        if event is None:
            return False
        if usage is not None:
            event.usage = usage.recorded()
            event.save(update_fields=["usage"])
        _finish(event, MemoryEvent.Status.FAILED, error)
        return True


def release(claimed: Claim, failure: Exception) -> MemoryEvent | None:
    """Record a failed attempt: back to PENDING for a retry, or FAILED for good.

    FAILED at once when the failure is PERMANENT, or after ENGRAM_EVENT_MAX_ATTEMPTS. Returns the
    event, or None (nothing written) when the event is no longer held by this claim.
    """
    with project_context(claimed.project_id):
        event = held_by(claimed).select_for_update().first()
        if event is None:
            return None
        final = permanent(failure) or event.attempts >= settings.ENGRAM_EVENT_MAX_ATTEMPTS
        status = MemoryEvent.Status.FAILED if final else MemoryEvent.Status.PENDING
        _finish(event, status, repr(failure))
        return event


def _finish(event: MemoryEvent, status: str, error: str) -> None:
    """End the current claim: PENDING again, or FAILED (in the caller's transaction)."""
    event.status, event.error = status, error[:5000]
    metrics.count_event(
        "failed" if status == MemoryEvent.Status.FAILED else "retried", event.attempts
    )
    event.lease_until, event.claim_id = None, None
    if status == MemoryEvent.Status.FAILED:
        event.completed_at = timezone.now()
    event.save(update_fields=["status", "error", "lease_until", "claim_id", "completed_at"])
