"""engram behind a transaction pooler (ENGRAM_DB_POOL_MODE=transaction; PgBouncer's
pool_mode = transaction, docs/operations.md "Connection pooler").

Such a pooler gives each transaction whichever server session is free, and a statement outside
a transaction is one of its own; nothing a session was given at connect time, or by a plain
SET, reaches the next transaction, or stays out of another client's. So the settings engram's
sessions otherwise get as libpq options (config.deadlines: the deadlines, pgvector's search
settings, no JIT) are set by each transaction for itself, as `SET LOCAL`s.

They cost no round trip: they go in the message of the transaction's first statement, `SET
LOCAL statement_timeout = 5000; …; <the statement>`, one query string the server runs in order
(and arms each statement's deadline as it starts it, so the statement has the new one). A
statement outside any transaction (Django's autocommit) gets them the same way: the statements
of one query string run as one transaction, so the settings end with it. `SET LOCAL`, not
`SELECT set_config(…)`: it takes no snapshot, so a `SET TRANSACTION ISOLATION LEVEL` may still
follow (memory.queries.transfer).

Only where the statement cannot share a query string (executemany; a cursor binding its
parameters server-side, which sends a statement per message) do the settings go first as a
statement of their own, in the statement's transaction: one round trip more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg import pq

from config import deadlines


class TransactionSettings:
    """A Django execute wrapper: the statement that starts a transaction carries the process's
    session settings (config.deadlines.transaction_statement()) with it."""

    def __call__(
        self, execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any
    ) -> Any:
        session = context["connection"].connection
        if session.info.transaction_status != pq.TransactionStatus.IDLE:
            return execute(sql, params, many, context)  # the transaction has them already
        settings = deadlines.transaction_statement()
        cursor = context["cursor"].cursor
        if not many and isinstance(sql, str) and isinstance(cursor, psycopg.ClientCursor):
            result = execute(f"{settings}; {sql}", params, many, context)
            for _ in range(settings.count(";") + 1):
                cursor.nextset()  # past each SET's result, to the statement's own
            return result
        with context["connection"].wrap_database_errors:
            if session.autocommit:
                with session.transaction():
                    session.execute(settings)
                    return execute(sql, params, many, context)
            session.execute(settings)  # psycopg sends the transaction's BEGIN first
        return execute(sql, params, many, context)


_WRAPPER = TransactionSettings()


def install(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """connection_created receiver: give the connection's statements the wrapper, once (the
    receiver runs on each reconnect of the same connection object), outermost (a wrapper a
    request pushed before the connection was made is popped at the request's end)."""
    if connection.vendor == "postgresql" and _WRAPPER not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, _WRAPPER)
