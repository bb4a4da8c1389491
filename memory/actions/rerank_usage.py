"""What reranked searches used, counted per project and day (one row).

May import memory.models and tenants.
"""

from __future__ import annotations

import uuid

from django.db import connection

from memory.models import RerankUsageDay
from tenants.db import project_context

# One statement: the day's row made or added to (concurrent searches add, never overwrite).
# The day is UTC's (settings.TIME_ZONE), as the dashboards' usage per day groups add requests.
_COUNT = f"""
INSERT INTO {RerankUsageDay._meta.db_table} AS u
    (project_id, day, searches, reranked, calls, input_tokens, output_tokens)
VALUES (%s, (now() AT TIME ZONE 'UTC')::date, 1, %s, %s, %s, %s)
ON CONFLICT (project_id, day) DO UPDATE SET
    searches = u.searches + 1,
    reranked = u.reranked + EXCLUDED.reranked,
    calls = u.calls + EXCLUDED.calls,
    input_tokens = u.input_tokens + EXCLUDED.input_tokens,
    output_tokens = u.output_tokens + EXCLUDED.output_tokens
"""  # noqa: S608 - the table's name is the model's, every value a parameter


def do_count_rerank(
    project_id: uuid.UUID,
    *,
    reranked: bool,
    calls: int,
    input_tokens: int,
    output_tokens: int,
) -> None:
    """Count one search the reranker was asked to order: whether it did (else the fused order
    stood), and the calls and tokens it used either way.

    Its commit does not wait for the WAL to reach the disk (synchronous_commit off, this
    transaction only): the count is on a search's path, and a crash can lose at most the last
    fraction of a second of counts, never a memory or another transaction's write. Inside a
    caller's transaction (a savepoint), that transaction's commit is left as it is."""
    own = not connection.in_atomic_block
    with project_context(project_id), connection.cursor() as cursor:
        if own:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
        cursor.execute(
            _COUNT,
            [project_id, int(reranked), calls, max(0, input_tokens), max(0, output_tokens)],
        )
