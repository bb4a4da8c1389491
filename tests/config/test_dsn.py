"""Database URLs (config/dsn.py): one host through dj-database-url as before; several hosts
through libpq's own parse, their query parameters kept as connection options for Django and the
broker; a replica never inherits the primary's target_session_attrs."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config import dsn
from memory.extraction.broker import connection_kwargs


def test_one_host_is_parsed_as_before() -> None:
    parsed = dsn.parse("postgresql://app:s%40cret@db.internal:5433/engram?sslmode=require")
    assert (parsed["HOST"], parsed["PORT"], parsed["USER"], parsed["PASSWORD"]) == (
        "db.internal",
        5433,
        "app",
        "s@cret",
    )
    assert dsn.libpq_options(parsed) == {"sslmode": "require"}


def test_several_hosts_keep_their_order_and_the_session_attribute() -> None:
    url = "postgresql://app:pw@10.0.0.1:5432,10.0.0.2:5433/engram?target_session_attrs=read-write"
    parsed = dsn.parse(url, conn_max_age=60, conn_health_checks=True)
    assert parsed["ENGINE"] == "django.db.backends.postgresql"
    assert (parsed["HOST"], parsed["PORT"], parsed["NAME"]) == (
        "10.0.0.1,10.0.0.2",
        "5432,5433",
        "engram",
    )
    assert (parsed["CONN_MAX_AGE"], parsed["CONN_HEALTH_CHECKS"]) == (60, True)
    kwargs = connection_kwargs(parsed)  # the broker's connections try the same hosts
    assert kwargs["host"] == "10.0.0.1,10.0.0.2" and kwargs["port"] == "5432,5433"
    assert kwargs["target_session_attrs"] == "read-write"


def test_an_unreadable_url_is_refused_with_a_reason() -> None:
    with pytest.raises(ImproperlyConfigured, match="cannot be read"):
        dsn.parse("postgresql://app:pw@h1,h2/engram?no_such_parameter=1")


def test_the_settings_keep_the_urls_parameters_and_the_replica_its_own() -> None:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {
        **os.environ,
        "DATABASE_URL": "postgresql://app:pw@h1:5432,h2:5432/engram?target_session_attrs=read-write",
        "ENGRAM_REPLICA_URL": "postgresql://app:pw@h3:5432/engram?sslmode=require",
    }
    code = (
        "import django, json, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'config.settings';"
        "from django.conf import settings as s;"
        "print(json.dumps([s.DATABASES[a]['OPTIONS'] for a in ('default', 'replica')]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], env=env,
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    default, replica = json.loads(done.stdout)
    assert default["target_session_attrs"] == "read-write" and default["connect_timeout"] == 5
    assert "target_session_attrs" not in replica  # a standby is read-only: it must not ask
    assert replica["sslmode"] == "require" and replica["connect_timeout"] == 2
    assert replica["options"] == default["options"]  # the same deadlines and search settings
