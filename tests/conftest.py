"""Test database set-up: the schema is created by the owner role, the tests run as the app role.

So row-level security, grants and append-only triggers are exercised exactly as in production.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import setup_databases, teardown_databases

from memory.extraction import broker

pytest_plugins = ["tests.fake_anthropic", "tests.fake_embeddings"]  # fake_claude, fake_embeddings


def _use_credentials(user: str | None, password: str | None) -> None:
    connection = connections["default"]
    connection.close()
    connection.settings_dict["USER"] = user
    connection.settings_dict["PASSWORD"] = password


_APP_CREDENTIALS: tuple[str | None, str | None] = (None, None)


@pytest.fixture(scope="session")
def django_db_setup(
    request: pytest.FixtureRequest, django_test_environment: None, django_db_blocker: Any
) -> Iterator[None]:
    global _APP_CREDENTIALS  # noqa: PLW0603 - remembered once per session
    app = connections["default"].settings_dict
    # One test database per pytest process, so parallel runs on one cluster do not collide.
    app.setdefault("TEST", {})["NAME"] = f"test_{app['NAME']}_{os.getpid()}"
    # Live-server request threads must not keep connections open past their request, or the
    # test database cannot be dropped at the end.
    app["CONN_MAX_AGE"] = 0
    app_credentials = _APP_CREDENTIALS = (app["USER"], app["PASSWORD"])
    owner = settings.ENGRAM_DB_OWNER
    owner_credentials = (owner["USER"], owner["PASSWORD"]) if owner else app_credentials
    verbosity = request.config.option.verbose
    with django_db_blocker.unblock():
        _use_credentials(*owner_credentials)
        db_config = setup_databases(verbosity=verbosity, interactive=False)
        _use_credentials(*app_credentials)
        # Queue messages go to the test database too (the broker was made at start-up).
        broker.configure(connections["default"].settings_dict)
    yield
    with django_db_blocker.unblock():
        dramatiq.get_broker().close()  # its pool holds connections to the test database
        _use_credentials(*owner_credentials)
        teardown_databases(db_config, verbosity=verbosity)


@pytest.fixture(autouse=True)
def _app_role() -> None:
    """Every test starts connected as the application role (live_api may have switched)."""
    connection = connections["default"]
    if _APP_CREDENTIALS != (None, None) and connection.settings_dict["USER"] != _APP_CREDENTIALS[0]:
        _use_credentials(*_APP_CREDENTIALS)


@pytest.fixture
def committed_db(transactional_db: None) -> Iterator[None]:
    """Rows are really committed (for other processes: a live server, a worker).

    Afterwards the tables are emptied with TRUNCATE, which the application role may not do
    (append-only audit tables): the flush that follows this fixture runs as the owner role.
    """
    yield
    owner = settings.ENGRAM_DB_OWNER
    if owner:
        _use_credentials(owner["USER"], owner["PASSWORD"])


@pytest.fixture
def live_api(committed_db: None, live_server: Any) -> str:
    """A real HTTP server on this test database."""
    return str(live_server.url)


@pytest.fixture(autouse=True)
def _no_slow_request_limit(settings: Any) -> None:
    """A request this suite makes may run past ENGRAM_API_SLOW_MS on a loaded machine (the
    first embedding, a 2-core CI run): outside tests/tenants/test_slow_requests.py, which sets
    its own, the per-key limit of slow requests must not refuse a test's concurrent requests."""
    settings.ENGRAM_API_SLOW_MS = 600_000
