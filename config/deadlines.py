"""Deadlines of the application's database sessions, chosen by the kind of process.

They are libpq connection options (`-c statement_timeout=…`), so they cost no round trip: a
session gets them when it connects. Every process starts with the background deadlines
(settings.py: workers, management commands, the test suite); the web server's processes switch
to the tighter API ones (config/wsgi.py), and `manage.py migrate` drops the statement deadline
(config/cli.py), since building an index over a large table may take minutes.

Under the API deadlines a request also has one time budget for all its statements together,
ENGRAM_API_REQUEST_BUDGET_MS from its start (RequestBudget): a request of many statements,
each under statement_timeout, cannot add up to more. While a request has used less than a
twentieth of its budget, each statement's own deadline bounds it (nothing is sent); past that,
each statement is sent with statement_timeout set to what is left, and none is sent once
nothing is: the request ends as a statement past its deadline does (503, nothing changed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

import psycopg
from psycopg import pq
from psycopg.errors import QueryCanceled

Kind = Literal["api", "background", "migrate"]
_kind: Kind = "background"
# Below this share of its budget used, a request's statements keep the session's deadline.
BUDGET_SLACK = 1 / 20


def session_options(base: str, deadlines: Mapping[str, int], idle_ms: int) -> str:
    """libpq `options`: `base`, then each deadline (milliseconds; 0 is none)."""
    settings = {**deadlines, "idle_in_transaction_session_timeout": idle_ms}
    return " ".join([base, *(f"-c {name}={int(ms)}" for name, ms in settings.items())])


def kind() -> Kind:
    """The deadlines this process's sessions open with (its kind of process)."""
    return _kind


def use(kind: Kind) -> None:
    """Open this process's later database sessions with `kind`'s deadlines; sessions already
    open are closed (they would keep the deadlines they were opened with)."""
    from django.conf import settings
    from django.db import connections

    global _kind  # noqa: PLW0603 - the process's kind, chosen once at start-up
    _kind = kind
    deadlines = dict(settings.ENGRAM_DB_DEADLINES["background" if kind == "migrate" else kind])
    if kind == "migrate":
        deadlines["statement_timeout"] = 0
    options = session_options(
        settings.DB_SESSION_OPTIONS, deadlines, settings.ENGRAM_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS
    )
    for alias in connections:
        connections[alias].settings_dict.setdefault("OPTIONS", {})["options"] = options
    connections.close_all()


class RequestBudget:
    """A Django execute wrapper: the request's statements end within `seconds` together."""

    def __init__(self, seconds: float, statement_ms: int) -> None:
        self.seconds = seconds
        self.started = time.monotonic()
        self.statement_ms = statement_ms  # the session's own statement_timeout
        self.lowered = False

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        used = time.monotonic() - self.started
        session = context["connection"].connection
        # A rollback always goes through (it ends what the budget cut short), and a failed
        # transaction takes no other statement anyway.
        failed = session.info.transaction_status == pq.TransactionStatus.INERROR
        if used > self.seconds * BUDGET_SLACK and not failed and not _ends(sql):
            left_ms = int((self.seconds - used) * 1000)
            if left_ms <= 0:
                from django.db import OperationalError

                # As the database says it (57014), so every caller treats it as the deadline.
                cancel = QueryCanceled(f"the request used its budget of {self.seconds:g} s")
                raise OperationalError(str(cancel)) from cancel
            if not self.statement_ms or left_ms < self.statement_ms:
                try:
                    session.execute(f"SET statement_timeout = {left_ms}")
                    self.lowered = True
                except psycopg.Error:
                    pass  # a broken session: the statement itself fails as Django reports it
        return execute(sql, params, many, context)

    def restore(self, connection: Any) -> None:
        """Give the session its own deadline back (it outlives the request)."""
        session = connection.connection
        if self.lowered and session is not None and not session.closed:
            if session.info.transaction_status == pq.TransactionStatus.INERROR:
                session.rollback()
            session.execute(f"SET statement_timeout = {int(self.statement_ms)}")


def _ends(sql: str) -> bool:
    return sql.lstrip()[:8].upper() == "ROLLBACK"


@contextmanager
def request_budget() -> Iterator[None]:
    """The request's statements under one budget, if this process runs under API deadlines."""
    from django.conf import settings
    from django.db import connection

    budget_ms = settings.ENGRAM_API_REQUEST_BUDGET_MS
    if _kind != "api" or not budget_ms:
        yield
        return
    statement_ms = int(settings.ENGRAM_DB_DEADLINES["api"]["statement_timeout"])
    budget = RequestBudget(budget_ms / 1000, statement_ms)
    try:
        with connection.execute_wrapper(budget):
            yield
    finally:
        try:
            budget.restore(connection)
        except Exception:  # a broken session is closed and replaced by Django anyway
            connection.close()
