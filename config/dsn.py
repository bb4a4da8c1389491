"""A database URL as Django's settings: dj-database-url's parse, and libpq's own for a URL it
cannot read — several hosts (`postgresql://u:p@primary:5432,standby:5432/engram?
target_session_attrs=read-write`), what a failover needs (docs/operations.md, Failover).

libpq tries the hosts in order and, with target_session_attrs=read-write, keeps the first that
accepts writes: after a standby is promoted, new connections reach it without a change of
settings. Query parameters (target_session_attrs, sslmode, …) become connection options.
"""

from __future__ import annotations

from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

# libpq parameters a URL may carry that engram passes on to every connection it makes to the
# database (Django's, the broker's): the rest of Django's OPTIONS are Django's own.
LIBPQ_OPTIONS = (
    "target_session_attrs",
    "load_balance_hosts",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "application_name",
)


def parse(url: str, **kwargs: Any) -> dict[str, Any]:
    """Django's DATABASES entry for `url` (kwargs as dj_database_url.parse takes them)."""
    if "," not in url.partition("@")[2].partition("/")[0]:
        return dict(dj_database_url.parse(url, **kwargs))
    try:
        found = conninfo_to_dict(url)
    except ProgrammingError as exc:
        raise ImproperlyConfigured(f"The database URL cannot be read: {exc}") from None
    parsed: dict[str, Any] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": found.pop("dbname", ""),
        "USER": found.pop("user", ""),
        "PASSWORD": found.pop("password", ""),
        "HOST": found.pop("host", ""),
        "PORT": found.pop("port", ""),
        "CONN_MAX_AGE": kwargs.get("conn_max_age", 0),
        "CONN_HEALTH_CHECKS": kwargs.get("conn_health_checks", False),
        "OPTIONS": {k: str(v) for k, v in found.items()},
    }
    return parsed


def libpq_options(database: dict[str, Any]) -> dict[str, str]:
    """The libpq parameters of a DATABASES entry's OPTIONS (see LIBPQ_OPTIONS)."""
    options = database.get("OPTIONS") or {}
    return {k: str(options[k]) for k in LIBPQ_OPTIONS if options.get(k)}
