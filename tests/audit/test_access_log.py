from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import AccessLog
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import auth


class AccessLogTestCase(BaseTestCase):
    def setUp(self) -> None:
        response = self.client.get("/v1/ping/", headers=auth(self.alice.raw))
        self.request_id = response["X-Request-ID"]
        self.project_id = self.alice.key.project_id

    def test_it_writes_one_row_per_request(self) -> None:
        with project_context(self.project_id):
            row = AccessLog.objects.get(request_id=self.request_id)
        assert row.path == "/v1/ping/"
        assert row.status == 200
        assert row.duration_ms >= 0

    def test_it_logs_unauthenticated_requests_where_no_tenant_can_read_them(self) -> None:
        with self.assertNoLogs("audit.middleware", level="ERROR"):
            response = self.client.get("/v1/ping/", headers=auth("eng_wrong"))
        assert response.status_code == 401
        for project_id in (self.project_id, self.charlie.key.project_id):
            with project_context(project_id):
                assert not AccessLog.objects.filter(request_id=response["X-Request-ID"]).exists()

    def test_it_cannot_be_updated_by_the_application_role(self) -> None:
        with (
            pytest.raises(DatabaseError, match="permission denied"),
            project_context(self.project_id),
            connection.cursor() as cursor,
        ):
            cursor.execute("UPDATE audit_accesslog SET status = 500")

    def test_it_cannot_be_deleted_by_the_application_role(self) -> None:
        with (
            pytest.raises(DatabaseError, match="permission denied"),
            project_context(self.project_id),
            connection.cursor() as cursor,
        ):
            cursor.execute("DELETE FROM audit_accesslog")

    def test_it_cannot_be_truncated_by_the_application_role(self) -> None:
        with (
            pytest.raises(DatabaseError, match="permission denied"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute("TRUNCATE audit_accesslog")

    def test_it_refuses_changes_even_through_the_orm(self) -> None:
        with pytest.raises(DatabaseError), project_context(self.project_id):
            AccessLog.objects.filter(request_id=self.request_id).update(status=500)
        with project_context(self.project_id):
            assert AccessLog.objects.get(request_id=self.request_id).status == 200
