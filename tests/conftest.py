"""Test database set-up: the schema is created by the owner role, the tests run as the app role.

So row-level security, grants and append-only triggers are exercised exactly as in production.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import setup_databases, teardown_databases


def _use_credentials(user: str | None, password: str | None) -> None:
    connection = connections["default"]
    connection.close()
    connection.settings_dict["USER"] = user
    connection.settings_dict["PASSWORD"] = password


@pytest.fixture(scope="session")
def django_db_setup(
    request: pytest.FixtureRequest, django_test_environment: None, django_db_blocker: Any
) -> Iterator[None]:
    app = connections["default"].settings_dict
    app_credentials = (app["USER"], app["PASSWORD"])
    owner = settings.ENGRAM_DB_OWNER
    owner_credentials = (owner["USER"], owner["PASSWORD"]) if owner else app_credentials
    verbosity = request.config.option.verbose
    with django_db_blocker.unblock():
        _use_credentials(*owner_credentials)
        db_config = setup_databases(verbosity=verbosity, interactive=False)
        _use_credentials(*app_credentials)
    yield
    with django_db_blocker.unblock():
        _use_credentials(*owner_credentials)
        teardown_databases(db_config, verbosity=verbosity)
