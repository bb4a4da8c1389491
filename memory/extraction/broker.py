"""The Dramatiq broker: dramatiq-postgres, its tables in engram's own database (schema dramatiq).

Configured once per process from the Django database settings, before the actors are imported.
Messages are sent only on commit (memory.actions), since the broker writes through its own
connection pool, outside the request's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dramatiq
from dramatiq.middleware import default_middleware
from dramatiq_postgres import PostgresBroker
from dramatiq_postgres.django.middleware import DbConnectionsMiddleware

SCHEMA = "dramatiq"


def connection_kwargs(database: Mapping[str, Any]) -> dict[str, str]:
    keys = (("NAME", "dbname"), ("USER", "user"), ("PASSWORD", "password"), ("HOST", "host"),
            ("PORT", "port"))  # fmt: skip
    return {libpq: str(database[key]) for key, libpq in keys if database.get(key)}


def configure(database: Mapping[str, Any]) -> PostgresBroker:
    """Make a broker on `database` the current one, and move the declared actors to it."""
    middleware = [m() for m in default_middleware] + [DbConnectionsMiddleware()]
    broker = PostgresBroker(
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
