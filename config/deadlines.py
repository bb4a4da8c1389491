"""Deadlines of the application's database sessions, chosen by the kind of process.

They are libpq connection options (`-c statement_timeout=…`), so they cost no round trip: a
session gets them when it connects. Behind a transaction pooler (ENGRAM_DB_POOL_MODE=transaction)
no session outlives a transaction, so each transaction sets them for itself instead, as `SET
LOCAL`s sent in the message of its first statement (config.pooling, transaction_statement()).

Every process starts with the background deadlines (settings.py: workers, management commands,
the test suite); the web server's processes switch to the tighter API ones (config/wsgi.py), and
`manage.py migrate` drops the statement deadline (config/cli.py), since building an index over a
large table may take minutes.

Under the API deadlines a request also has one time budget for all its statements together,
ENGRAM_API_REQUEST_BUDGET_MS from its start (RequestBudget): a request of many statements,
each under statement_timeout, cannot add up to more. While a request has used less than a
twentieth of its budget, each statement's own deadline bounds it (nothing is sent); past that,
each statement is sent with statement_timeout set to what is left, and none is sent once
nothing is: the request ends as a statement past its deadline does (503, nothing changed).
Behind a transaction pooler the lowered deadline is the open transaction's (SET LOCAL); a
statement that starts a transaction, or runs outside one, keeps its full deadline.
"""

from __future__ import annotations

import contextlib
import re
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


_statement: str | None = None  # transaction_statement(), made by use()
_SETTING_VALUE = re.compile(r"[A-Za-z0-9_.]+")  # what the statements below may carry unquoted


def session_values(
    base: Mapping[str, str], deadlines: Mapping[str, int], idle_ms: int
) -> dict[str, str]:
    """The sessions' settings: `base`, then each deadline (milliseconds; 0 is none)."""
    timeouts = {**deadlines, "idle_in_transaction_session_timeout": idle_ms}
    return {**base, **{name: str(int(ms)) for name, ms in timeouts.items()}}


def session_options(values: Mapping[str, str]) -> str:
    """libpq `options` giving a session `values`."""
    return " ".join(f"-c {name}={value}" for name, value in values.items())


def transaction_statement() -> str:
    """`SET LOCAL` of each of this process's session settings, `;`-separated: what each
    transaction runs first behind a transaction pooler (config.pooling)."""
    global _statement  # noqa: PLW0603 - the default kind's, until use() chooses one
    if _statement is None:
        _statement = _set_local(_values(_kind))
    return _statement


def _set_local(values: Mapping[str, str]) -> str:
    for name, value in values.items():
        if not (_SETTING_VALUE.fullmatch(name) and _SETTING_VALUE.fullmatch(value)):
            raise ValueError(f"unexpected session setting {name}={value!r}")
    return "; ".join(f"SET LOCAL {name} = {value}" for name, value in values.items())


def _values(kind: Kind) -> dict[str, str]:
    from django.conf import settings

    deadlines = dict(settings.ENGRAM_DB_DEADLINES["background" if kind == "migrate" else kind])
    if kind == "migrate":
        deadlines["statement_timeout"] = 0
    return session_values(
        settings.DB_SESSION_SETTINGS, deadlines, settings.ENGRAM_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS
    )


def kind() -> Kind:
    """The deadlines this process's sessions open with (its kind of process)."""
    return _kind


def use(kind: Kind) -> None:
    """Open this process's later database sessions with `kind`'s deadlines; sessions already
    open are closed (they would keep the deadlines they were opened with)."""
    from django.conf import settings
    from django.db import connections

    global _kind, _statement  # noqa: PLW0603 - the process's kind, chosen once at start-up
    _kind = kind
    values = _values(kind)
    _statement = _set_local(values)
    if not settings.TRANSACTION_POOLING:
        options = session_options(values)
        for alias in connections:
            connections[alias].settings_dict.setdefault("OPTIONS", {})["options"] = options
    connections.close_all()


class RequestBudget:
    """A Django execute wrapper: the request's statements end within `seconds` together."""

    def __init__(self, seconds: float, statement_ms: int, *, pooled: bool = False) -> None:
        self.seconds = seconds
        self.started = time.monotonic()
        self.statement_ms = statement_ms  # the session's own statement_timeout
        self.lowered = False
        # Behind a transaction pooler a session-level SET would stay on a server session other
        # clients get next: the budget lowers the deadline for the open transaction only.
        self.pooled = pooled

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
                # A broken session: the statement itself fails as Django reports it.
                with contextlib.suppress(psycopg.Error):
                    self._lower(session, left_ms)
        return execute(sql, params, many, context)

    def _lower(self, session: Any, left_ms: int) -> None:
        if not self.pooled:
            session.execute(f"SET statement_timeout = {left_ms}")
            self.lowered = True
        elif session.info.transaction_status == pq.TransactionStatus.INTRANS:
            session.execute(f"SET LOCAL statement_timeout = {left_ms}")
        # Else the statement opens a transaction (or runs on its own), and carries the
        # process's own deadline with it (config.pooling): it keeps that one.

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
    budget = RequestBudget(budget_ms / 1000, statement_ms, pooled=settings.TRANSACTION_POOLING)
    try:
        with connection.execute_wrapper(budget):
            yield
    finally:
        try:
            budget.restore(connection)
        except Exception:  # a broken session is closed and replaced by Django anyway
            connection.close()
