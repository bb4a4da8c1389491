"""The Dramatiq broker: dramatiq-postgres, its tables in engram's own database (schema dramatiq).

Configured once per process from the Django database settings, before the actors are imported.
Messages are sent only on commit (memory.actions), since the broker writes through its own
connection pool, outside the request's transaction.

A send gives up after SEND_BUDGET_SECONDS (dramatiq-postgres alone retries for minutes, with
30 s pool waits): it runs after the request's commit, so while the database is unreachable it
held an add whose memory was already stored until gunicorn killed the worker (a 500 after 30 s).
The callers send robustly (transaction.on_commit(..., robust=True)): a lost send is logged, the
request still answers; what repairs it is said where each send is made (memory.actions).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dramatiq
import tenacity
from dramatiq.common import current_millis, dq_name
from dramatiq.middleware import default_middleware
from dramatiq_postgres import PostgresBroker
from dramatiq_postgres.broker import QUERIES
from dramatiq_postgres.django.middleware import DbConnectionsMiddleware
from dramatiq_postgres.utils import tidy4json
from psycopg import DatabaseError, InterfaceError
from psycopg.types.json import Json
from psycopg_pool import PoolTimeout

SCHEMA = "dramatiq"
SEND_BUDGET_SECONDS = 3.0


class Broker(PostgresBroker):  # type: ignore[misc]  # dramatiq_postgres has no types
    """dramatiq-postgres with sends that give up after SEND_BUDGET_SECONDS.

    PostgresBroker.enqueue retries for minutes, and each try takes its connection through
    dramatiq_postgres.utils.getconn, which retries again (10 times, waits up to 30 s): the same
    statement here, with one bounded retry loop and a bounded wait for a pooled connection.
    """

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> Any:
        self.emit_before("enqueue", message, delay)
        if delay:
            message = message.copy(queue_name=dq_name(message.queue_name))
            message.options["eta"] = current_millis() + delay
        query = QUERIES.ENQUEUE if self.notify else QUERIES.ENQUEUE_QUIET
        row = (message.queue_name, message.message_id, Json(tidy4json(message)), delay or 0)
        for attempt in tenacity.Retrying(
            retry=tenacity.retry_if_exception_type((DatabaseError, InterfaceError, PoolTimeout)),
            stop=tenacity.stop_after_delay(SEND_BUDGET_SECONDS),
            wait=tenacity.wait_random_exponential(multiplier=0.1, max=1),
            reraise=True,
        ):
            with attempt, self.pool.connection(timeout=SEND_BUDGET_SECONDS) as conn:
                conn.execute(query, row)
        self.emit_after("enqueue", message, delay)
        return message


def connection_kwargs(database: Mapping[str, Any]) -> dict[str, str]:
    keys = (("NAME", "dbname"), ("USER", "user"), ("PASSWORD", "password"), ("HOST", "host"),
            ("PORT", "port"))  # fmt: skip
    found = {libpq: str(database[key]) for key, libpq in keys if database.get(key)}
    timeout = (database.get("OPTIONS") or {}).get("connect_timeout")
    if timeout:
        found["connect_timeout"] = str(timeout)
    return found


def configure(database: Mapping[str, Any]) -> PostgresBroker:
    """Make a broker on `database` the current one, and move the declared actors to it."""
    middleware = [m() for m in default_middleware] + [DbConnectionsMiddleware()]
    broker = Broker(
        url=connection_kwargs(database), schema=SCHEMA, results=False, middleware=middleware
    )
    previous = dramatiq.get_broker() if _has_broker() else None
    dramatiq.set_broker(broker)
    if previous is not None:
        for name in previous.get_declared_actors():
            actor = previous.get_actor(name)
            actor.broker = broker
            broker.declare_actor(actor)
    return broker


def _has_broker() -> bool:
    return dramatiq.broker.global_broker is not None
