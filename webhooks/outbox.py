"""What puts deliveries in the outbox from Python: the completion of a user's erasure.

Memory events need nothing here: the trigger on memory_memoryhistory (migration 0001) writes
their deliveries in the change's transaction. Both go through the database function
webhooks_outbox_add, which also queues the worker's message.
"""

from __future__ import annotations

import uuid

from django.db import connection

from webhooks.models import ERASURE_COMPLETE


def erasure_complete(project_id: uuid.UUID, subject_hash: str) -> int:
    """Queue erasure_complete for the purge record the erasure just wrote (call it in the
    erasure's transaction, after engram_erase_user). Only the record's id goes in the outbox;
    returns the number of deliveries made."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT webhooks_outbox_add(%s, %s, NULL, NULL, p.id) FROM audit_purgerecord p "
            "WHERE p.project_id = %s AND p.subject_hash = %s "
            "ORDER BY p.created_at DESC LIMIT 1",
            [project_id, ERASURE_COMPLETE, project_id, subject_hash],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0
