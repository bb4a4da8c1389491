"""A request that changed nothing commits its access-log row without waiting for the disk; a
request that wrote anything else commits durably, with its row (audit.access)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test import RequestFactory
from django.urls import resolve

from audit.access import write_row
from audit.models import AccessLog
from tenants.actions import NewApiKey
from tenants.authentication import KEY_ATTRIBUTE
from tenants.db import project_context
from tests.factory import auth, make_key, make_memory

# The test's own transactions are real ones: a row is committed, and only the outermost
# transaction decides how it commits.
pytestmark = pytest.mark.usefixtures("committed_db")


def commit_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('synchronous_commit')")
        return str(cursor.fetchone()[0])


def row_for(key: NewApiKey) -> None:
    request = RequestFactory().get("/v1/ping/")
    request.resolver_match = resolve("/v1/ping/")
    request.__dict__[KEY_ATTRIBUTE] = key.key
    write_row(request, 200)


def test_a_transaction_that_changed_nothing_commits_its_row_asynchronously() -> None:
    key = make_key()
    with project_context(key.key.project_id):
        assert commit_mode() == "on"
        row_for(key)
        assert commit_mode() == "off"
    with project_context(key.key.project_id):
        assert commit_mode() == "on"  # for that transaction only
        assert AccessLog.objects.filter(api_key_id=key.key.pk).count() == 1


def test_a_transaction_that_wrote_something_else_commits_durably() -> None:
    key = make_key()
    with project_context(key.key.project_id):
        make_memory(key.key.project_id)
        row_for(key)
        assert commit_mode() == "on"


def test_a_row_written_inside_an_enclosing_transaction_leaves_its_commit_alone() -> None:
    key = make_key()
    with transaction.atomic(), project_context(key.key.project_id):
        row_for(key)
        # The enclosing block could still write after the row: its commit stays durable.
        assert commit_mode() == "on"


def test_requests_are_logged_either_way(client: object) -> None:
    key = make_key()
    headers = auth(key.raw)
    assert client.get("/v1/ping/", headers=headers).status_code == 200  # type: ignore[attr-defined]
    body = {"messages": "I like tea", "user_id": "alice", "infer": False}
    response = client.post(  # type: ignore[attr-defined]
        "/v3/memories/add/", body, content_type="application/json", headers=headers
    )
    assert response.status_code == 200
    with project_context(key.key.project_id):
        actions = sorted(AccessLog.objects.values_list("action", flat=True))
    assert len(actions) == 2
