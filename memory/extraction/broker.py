"""The Dramatiq broker: dramatiq-postgres, its tables in engram's own database (schema dramatiq).

Configured once per process from the Django database settings, before the actors are imported.
Messages are sent only on commit (memory.actions, by job name through memory.jobs, which
enqueues on the broker made current here), since the broker writes through its own connection
pool, outside the request's transaction.

A send gives up after SEND_BUDGET_SECONDS (dramatiq-postgres alone retries for minutes, with
30 s pool waits): it runs after the request's commit, so while the database is unreachable it
held an add whose memory was already stored until gunicorn killed the worker (a 500 after 30 s).
The callers send robustly (transaction.on_commit(..., robust=True)): a lost send is logged, the
request still answers; what repairs it is said where each send is made (memory.actions).

Behind a transaction pooler (ENGRAM_DB_POOL_MODE=transaction) every statement of the broker
works as it is (each is a transaction; its advisory lock is the transaction's), but a worker's
LISTEN for new jobs needs a session of its own: it goes over ENGRAM_BROKER_LISTEN_URL (the
database directly), or, without one, workers poll for jobs each second instead of listening.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dramatiq
import tenacity
from django.conf import settings
from dramatiq.common import current_millis, dq_name
from dramatiq.message import Message
from dramatiq.middleware import default_middleware
from dramatiq_postgres import PostgresBroker
from dramatiq_postgres.broker import QUERIES, Notifier, PostgresConsumer
from dramatiq_postgres.django.middleware import DbConnectionsMiddleware
from dramatiq_postgres.utils import make_pool, raise_connection_error, tidy4json, transaction
from psycopg import DatabaseError, InterfaceError
from psycopg.types.json import Json
from psycopg_pool import PoolTimeout

from config import dsn
from memory import jobs

SCHEMA = "dramatiq"
SEND_BUDGET_SECONDS = 3.0


class Broker(PostgresBroker):  # type: ignore[misc]  # dramatiq_postgres has no types
    """dramatiq-postgres with sends that give up after SEND_BUDGET_SECONDS, and its LISTEN
    on a connection of its own when `listen_url` is given.

    PostgresBroker.enqueue retries for minutes, and each try takes its connection through
    dramatiq_postgres.utils.getconn, which retries again (10 times, waits up to 30 s): the same
    statement here, with one bounded retry loop and a bounded wait for a pooled connection.
    """

    def __init__(self, *, listen_url: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.listen_pool: Any = None
        if listen_url is not None and kwargs.get("listen", True):
            # One session per process, held while it listens (the library's Notifier).
            self.listen_pool = make_pool(dict(listen_url), maxconn=1)
            self.notifier = Notifier(self.listen_pool)

    def close(self) -> None:
        super().close()
        if self.listen_pool is not None:
            self.listen_pool.close()

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

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 30000) -> Any:
        if queue_name not in FAIR_QUEUES:
            return super().consume(queue_name, prefetch, timeout)
        return FairConsumer(broker=self, queue_name=queue_name, prefetch=prefetch, timeout=timeout)


# Every queue's messages carry a project id (memory.jobs: its position in the arguments), and
# every queue is claimed fairly between projects. Webhook deliveries, which a receiver the
# project chose may hold for up to ENGRAM_WEBHOOK_TIMEOUT each, also have a cap on how many of a
# project's a worker may hold at once (ENGRAM_WEBHOOK_PROJECT_CONCURRENCY). Delay queues
# (".DQ") are not claimed here: their messages only wait for their time, then come back here.
FAIR_QUEUES = jobs.project_args()
# The claim of dramatiq-postgres (oldest due message first), but fair between projects: it
# takes the oldest due message of each project (DISTINCT ON), and serves first the projects
# with the fewest messages held by workers right now, the oldest head first among equals,
# skipping a project that holds its cap. So a project's backlog of 500 adds delays another
# project's add by at most the messages running when it arrives, not by the backlog. Rows are
# locked and re-checked as in the library's claim (FOR UPDATE ... SKIP LOCKED, then state =
# 'queued' again under the lock).
FAIR_CLAIM = f"""
WITH heads AS (
    SELECT DISTINCT ON (message->'args'->>%(arg)s)
        message_id, message->'args'->>%(arg)s AS project, available_at, position
    FROM {SCHEMA}.queue
    WHERE queue_name = %(queue)s AND state = 'queued' AND available_at <= NOW()
    ORDER BY message->'args'->>%(arg)s, available_at, position
), busy AS (
    SELECT message->'args'->>%(arg)s AS project, count(*) AS held
    FROM {SCHEMA}.queue
    WHERE queue_name = %(queue)s AND state = 'consumed'
    GROUP BY 1
), next AS (
    SELECT q.message_id
    FROM {SCHEMA}.queue AS q
    JOIN heads AS h USING (message_id)
    LEFT JOIN busy AS b ON b.project = h.project
    WHERE q.state = 'queued' AND coalesce(b.held, 0) < %(cap)s
    ORDER BY coalesce(b.held, 0), h.available_at, h.position
    LIMIT %(limit)s
    FOR UPDATE OF q SKIP LOCKED
)
UPDATE {SCHEMA}.queue AS q
    SET state = 'consumed', worker_id = %(worker)s, consumed_at = NOW(), mtime = NOW()
FROM next
WHERE q.message_id = next.message_id
RETURNING q.message::text
"""  # noqa: S608 - SCHEMA is a constant
NO_CAP = 2**31 - 1


def project_cap(queue_name: str) -> int:
    """How many of one project's messages of the queue workers may hold at once."""
    if queue_name == jobs.DELIVER_WEBHOOK.queue_name:
        return int(settings.ENGRAM_WEBHOOK_PROJECT_CONCURRENCY)
    return NO_CAP


class FairConsumer(PostgresConsumer):  # type: ignore[misc]  # dramatiq_postgres has no types
    """dramatiq-postgres's consumer with FAIR_CLAIM as its claim (one message per project
    per claim; the library's batching, acks, requeues and wake-ups unchanged)."""

    @raise_connection_error  # type: ignore[untyped-decorator]
    def claim(self, limit: int) -> None:
        with transaction(self.get_consume_conn()) as cursor:
            cursor.execute(
                FAIR_CLAIM,
                {
                    "queue": self.queue_name,
                    "arg": FAIR_QUEUES[self.queue_name],
                    "cap": project_cap(self.queue_name),
                    "limit": limit,
                    "worker": self.broker.worker_id,
                },
            )
            rows = cursor.fetchall()
        self.buffer.extend(Message.decode(payload.encode("utf-8")) for (payload,) in rows)


def connection_kwargs(database: Mapping[str, Any]) -> dict[str, str]:
    keys = (
        ("NAME", "dbname"),
        ("USER", "user"),
        ("PASSWORD", "password"),
        ("HOST", "host"),
        ("PORT", "port"),
    )
    found = {libpq: str(database[key]) for key, libpq in keys if database.get(key)}
    found.update(dsn.libpq_options(dict(database)))  # several hosts' target_session_attrs, TLS
    timeout = (database.get("OPTIONS") or {}).get("connect_timeout")
    if timeout:
        found["connect_timeout"] = str(timeout)
    return found


def configure(database: Mapping[str, Any]) -> PostgresBroker:
    """Make a broker on `database` the current one, and move the declared actors to it."""
    middleware = [m() for m in default_middleware] + [DbConnectionsMiddleware()]
    ttl = settings.ENGRAM_WORKER_HEARTBEAT_SECONDS
    listen = settings.ENGRAM_BROKER_LISTEN
    broker = Broker(
        url=connection_kwargs(database),
        # A LISTEN through a transaction pooler lands on a server session other clients get
        # next (and never hears its notifications): poll instead, unless there is a direct URL.
        listen=listen is not None or not settings.TRANSACTION_POOLING,
        listen_url=connection_kwargs(listen) if listen is not None else None,
        schema=SCHEMA,
        results=False,
        middleware=middleware,
        heartbeat_ttl=float(ttl),
        heartbeat_interval=ttl / 4,
        maintenance_interval=min(30.0, ttl / 2),
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
