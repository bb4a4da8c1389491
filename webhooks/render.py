"""A delivery's body, made when it is sent from what the database holds then.

The outbox keeps ids only; the text and scope ids come from the memory's history row, read
now. Erasure deletes that row and redaction rewrites it (audit migrations), so what a user had
erased is never sent: a delivery whose row is gone, or whose memory was redacted, is dropped
with the reason instead.

Nor is what a user asked to have erased, while the worker has not yet erased it (their memories
hidden, the history rows still there): a change of a user with an erasure request not done,
made before it or while it is pending, is sent by ids only if it removed the memory (as the
memory_delete the outbox trigger writes for each memory an erasure hides, which names no history
row: webhooks migration 0003), and dropped otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from audit.models import ErasureRequest, PurgeRecord
from memory.models import SCOPE_FIELDS, Memory, MemoryHistory
from webhooks.models import ERASURE_COMPLETE, MEMORY_DELETE, Delivery

# The text redaction leaves in a memory and in the history rows that quoted it (audit 0012).
REDACTED_TEXT = "[redacted]"


@dataclass(frozen=True)
class Dropped:
    reason: str


def render(delivery: Delivery) -> bytes | Dropped:
    """The JSON body to POST (compact, UTF-8), or why there is nothing to send."""
    if delivery.event_type == ERASURE_COMPLETE:
        details = _erasure_details(delivery)
    else:
        details = _memory_details(delivery)
    if isinstance(details, Dropped):
        return details
    body = {
        "event_type": delivery.event_type,
        "delivery_id": str(delivery.id),
        "project_id": str(delivery.project_id),
        "event_details": details,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _memory_details(delivery: Delivery) -> dict[str, Any] | Dropped:
    if delivery.history_id is None:
        if delivery.event_type == MEMORY_DELETE and delivery.memory_id is not None:
            return _ids_only(delivery)  # a memory hidden by its user's erasure
        return Dropped("no history row named")
    row = MemoryHistory.objects.filter(
        project_id=delivery.project_id, pk=delivery.history_id
    ).first()
    if row is None:
        return Dropped("the change's history row is gone (the memory or its user was erased)")
    if _erasure_asked(row):
        deleted = delivery.event_type == MEMORY_DELETE
        return _ids_only(delivery) if deleted else Dropped("the memory's user's erasure is asked")
    state = (
        Memory.objects.filter(project_id=delivery.project_id, pk=row.memory_id)
        .values_list("state", flat=True)
        .first()
    )
    redacted = state == Memory.State.REDACTED or REDACTED_TEXT in (row.old_memory, row.new_memory)
    if redacted and row.event != MemoryHistory.Event.REDACT:
        return Dropped("the memory was redacted since the change")
    text = None if row.event == MemoryHistory.Event.REDACT else row.new_memory or row.old_memory
    return {
        "id": str(row.memory_id),
        "event": row.event,
        "data": {"memory": text},
        "categories": list(row.categories or []),
        "metadata": row.metadata or {},
        **{field: getattr(row, field) for field in SCOPE_FIELDS},
        "history_id": str(row.id),
        "add_event_id": str(row.event_id) if row.event_id else None,
        "created_at": row.created_at.isoformat(),
    }


def _erasure_asked(row: MemoryHistory) -> bool:
    """Whether `row`'s user has an erasure not done (their id in clear is kept until then):
    pending, or asked after the row was written and failed for good (purge_user is due)."""
    if not row.user_id:
        return False
    unfinished = Q(status=ErasureRequest.Status.PENDING) | Q(
        status=ErasureRequest.Status.FAILED, created_at__gte=row.created_at
    )
    return (
        ErasureRequest.objects.filter(project_id=row.project_id, subject_id=row.user_id)
        .exclude(subject_id="")
        .filter(unfinished)
        .exists()
    )


def _ids_only(delivery: Delivery) -> dict[str, Any]:
    """A memory_delete that names the memory and nothing of its user: no text, scope ids,
    metadata or categories (the Platform's shape, those fields empty)."""
    return {
        "id": str(delivery.memory_id),
        "event": "DELETE",
        "data": {"memory": None},
        "categories": [],
        "metadata": {},
        **dict.fromkeys(SCOPE_FIELDS),
        "history_id": None,
        "add_event_id": None,
        "created_at": delivery.created_at.isoformat(),
    }


def _erasure_details(delivery: Delivery) -> dict[str, Any] | Dropped:
    if delivery.subject_id is None:
        return Dropped("no purge record named")
    record = PurgeRecord.objects.filter(
        project_id=delivery.project_id, pk=delivery.subject_id
    ).first()
    if record is None:
        return Dropped("the erasure's purge record is gone")
    requests = ErasureRequest.objects.filter(
        project_id=delivery.project_id,
        subject_hash=record.subject_hash,
        status=ErasureRequest.Status.SUCCEEDED,
        # Marked done in the erasure's own transaction, whose now() the record carries.
        completed_at__gte=record.created_at,
    ).order_by("created_at")
    return {
        "id": str(record.id),
        "event": "ERASURE_COMPLETE",
        "data": {
            "subject": record.subject_kind,
            "counts": record.counts,
            "erasure_request_ids": [str(pk) for pk in requests.values_list("pk", flat=True)],
        },
        "created_at": record.created_at.isoformat(),
    }
