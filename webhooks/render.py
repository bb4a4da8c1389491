"""A delivery's body, made when it is sent from what the database holds then.

The outbox keeps ids only; the text and scope ids come from the memory's history row, read
now. Erasure deletes that row and redaction rewrites it (audit migrations), so what a user had
erased is never sent: a delivery whose row is gone, or whose memory was redacted, is dropped
with the reason instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from audit.models import ErasureRequest, PurgeRecord
from memory.models import SCOPE_FIELDS, Memory, MemoryHistory
from webhooks.models import ERASURE_COMPLETE, Delivery

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
        return Dropped("no history row named")
    row = MemoryHistory.objects.filter(
        project_id=delivery.project_id, pk=delivery.history_id
    ).first()
    if row is None:
        return Dropped("the change's history row is gone (the memory or its user was erased)")
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
