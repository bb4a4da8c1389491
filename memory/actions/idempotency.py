"""Idempotency-Key records: taking a key for a request, storing its answer, pruning old ones.

May import memory.models, tenants and Django.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from memory.models import IdempotentRequest
from tenants.db import project_context

_CLAIM_KEY = """
INSERT INTO memory_idempotentrequest AS r (project_id, key, body_hash, status, created_at)
VALUES (%(project)s, %(key)s, %(hash)s, 0, %(now)s)
ON CONFLICT (project_id, key) DO UPDATE
    SET body_hash = EXCLUDED.body_hash, status = 0, response = NULL,
        created_at = EXCLUDED.created_at
    WHERE r.created_at < %(expired_before)s
RETURNING r.id
"""


def do_claim_idempotency_key(
    project_id: uuid.UUID, key: str, body_hash: str, *, expired_before: datetime
) -> bool:
    """Take `key` for the request being answered, in the caller's (the add's) transaction.

    True: the key is new, or its record older than `expired_before` (taken over): answer, then
    do_record_idempotent_response. False: the key is taken; its first answer is committed and
    readable (queries.idempotent_request). One statement on the unique (project, key) index: a
    concurrent request with the same key waits here until the first one's transaction ends,
    then finds its record (or takes the key, if the first one rolled back). It takes no
    savepoint: a failure here ends the add's transaction.
    """
    params: dict[str, Any] = {
        "project": project_id,
        "key": key,
        "hash": body_hash,
        "now": timezone.now(),
        "expired_before": expired_before,
    }
    with project_context(project_id, savepoint=False), connection.cursor() as cursor:
        cursor.execute(_CLAIM_KEY, params)
        return cursor.fetchone() is not None


def do_record_idempotent_response(
    project_id: uuid.UUID, key: str, status: int, response: Any
) -> None:
    """Store the answer to replay for a key taken by do_claim_idempotency_key."""
    with project_context(project_id, savepoint=False):
        IdempotentRequest.objects.filter(project_id=project_id, key=key).update(
            status=status, response=response
        )


def do_prune_idempotency_keys(project_id: uuid.UUID, *, expired_before: datetime) -> int:
    """Delete the project's Idempotency-Key records older than `expired_before`."""
    with project_context(project_id):
        deleted, _ = IdempotentRequest.objects.filter(
            project_id=project_id, created_at__lt=expired_before
        ).delete()
    return deleted
