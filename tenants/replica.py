"""Read-replica routing for search's statement (the "replica" alias, set by ENGRAM_REPLICA_URL).

Read-your-writes: a search must see every write that completed before it began. A completed
commit's WAL record lies at or before the primary's flushed WAL position (its insert position
when commits are asynchronous, synchronous_commit=off), so that position, read when the search
starts, is the watermark; the standby serves the statement only if it has already replayed past
it. Otherwise the statement runs on the primary, in the caller's transaction, as it would
without a replica; so do searches inside a transaction that has written (the standby cannot see
uncommitted rows), and all searches for RETRY_SECONDS after the standby failed to connect or
answer. The watermark covers the whole cluster, so under a constant stream of commits (of any
project) the standby is usually a millisecond or two behind it: a search waits for it up to
ENGRAM_REPLICA_WAIT_MS, then stays on the primary.

On the standby the statement runs in a transaction of its own with the caller's tenant
(tenants.db.same_tenant), so row-level security applies there exactly as on the primary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections

from tenants.db import same_tenant

PRIMARY = "default"
REPLICA = "replica"
# After the standby fails to connect (or dies mid-statement), searches in this process stay on
# the primary this long, so an unreachable host costs one connect timeout, not one per search.
RETRY_SECONDS = 30.0
POLL_SECONDS = 0.001  # between checks of a standby that is behind, within ENGRAM_REPLICA_WAIT_MS

logger = logging.getLogger(__name__)

# Asynchronous commits may still be in the WAL buffers: then only the insert position bounds
# them. A transaction that has written (an xid) must read its own uncommitted rows: no watermark.
WATERMARK = (
    "SELECT CASE WHEN pg_current_xact_id_if_assigned() IS NOT NULL THEN NULL "
    "WHEN current_setting('synchronous_commit') = 'off' THEN pg_current_wal_insert_lsn() "
    "ELSE pg_current_wal_flush_lsn() END"
)
# NULL (not a standby, or nothing replayed yet) counts as behind.
CAUGHT_UP = "SELECT COALESCE(pg_last_wal_replay_lsn() >= %s::pg_lsn, false)"

_down_until = 0.0  # time.monotonic() before which this process does not try the standby


def fetch_all(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Run a read-only statement with the caller's tenant and return its rows: on the standby
    when it is configured, reachable and caught up (see the module docstring), else on the
    primary's connection, inside the caller's transaction."""
    if REPLICA in connections.settings and time.monotonic() >= _down_until:
        watermark = _watermark()
        found = _on_replica(sql, params, watermark) if watermark is not None else None
        if found is not None:
            return found
    with connections[PRIMARY].cursor() as cursor:
        cursor.execute(sql, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


def _watermark() -> str | None:
    """The primary's WAL position every completed write lies before; None when the open
    transaction has written."""
    with connections[PRIMARY].cursor() as cursor:
        cursor.execute(WATERMARK)
        row = cursor.fetchone()
    return None if row is None or row[0] is None else str(row[0])


def _caught_up(replica: Any, watermark: str) -> bool:
    """Whether the standby has replayed past `watermark`, waiting for it up to
    ENGRAM_REPLICA_WAIT_MS: on a busy cluster it usually trails by a millisecond or two."""
    deadline = time.monotonic() + settings.ENGRAM_REPLICA_WAIT_MS / 1000
    while True:
        with replica.cursor() as cursor:
            cursor.execute(CAUGHT_UP, [watermark])
            row = cursor.fetchone()
        if row and row[0]:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)


def _on_replica(sql: str, params: Sequence[Any], watermark: str) -> list[tuple[Any, ...]] | None:
    """The statement's rows from the standby, or None when it is behind or failed."""
    global _down_until  # noqa: PLW0603 - per-process back-off, read on every search
    replica = connections[REPLICA]
    try:
        if not _caught_up(replica, watermark):
            return None
        with same_tenant(REPLICA, PRIMARY), replica.cursor() as cursor:
            cursor.execute(sql, params)
            rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows
    except DatabaseError as error:
        # A query error on a live standby (a recovery conflict cancels the statement) costs
        # this search only; a lost connection sends searches to the primary for a while.
        if replica.connection is None or replica.connection.closed:
            replica.close()
            _down_until = time.monotonic() + RETRY_SECONDS
            logger.warning(
                "read replica unreachable (%s): searches use the primary for %.0f s",
                type(error).__name__,
                RETRY_SECONDS,
            )
        return None
