"""Deadlines of the application's database sessions, chosen by the kind of process.

They are libpq connection options (`-c statement_timeout=…`), so they cost no round trip: a
session gets them when it connects. Every process starts with the background deadlines
(settings.py: workers, management commands, the test suite); the web server's processes switch
to the tighter API ones (config/wsgi.py), and `manage.py migrate` drops the statement deadline
(config/cli.py), since building an index over a large table may take minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

Kind = Literal["api", "background", "migrate"]


def session_options(base: str, deadlines: Mapping[str, int], idle_ms: int) -> str:
    """libpq `options`: `base`, then each deadline (milliseconds; 0 is none)."""
    settings = {**deadlines, "idle_in_transaction_session_timeout": idle_ms}
    return " ".join([base, *(f"-c {name}={int(ms)}" for name, ms in settings.items())])


def use(kind: Kind) -> None:
    """Open this process's later database sessions with `kind`'s deadlines; sessions already
    open are closed (they would keep the deadlines they were opened with)."""
    from django.conf import settings
    from django.db import connections

    deadlines = dict(settings.ENGRAM_DB_DEADLINES["background" if kind == "migrate" else kind])
    if kind == "migrate":
        deadlines["statement_timeout"] = 0
    options = session_options(
        settings.DB_SESSION_OPTIONS, deadlines, settings.ENGRAM_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS
    )
    for alias in connections:
        connections[alias].settings_dict.setdefault("OPTIONS", {})["options"] = options
    connections.close_all()
