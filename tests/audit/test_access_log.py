from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction
from django.http.response import HttpResponseBase
from django.test import override_settings
from django.urls import include, path
from rest_framework.decorators import api_view
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

import config.urls
from audit.access import note_access
from audit.models import AccessLog
from tenants.actions import do_revoke_api_key
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import auth

HOSTILE = "a\x00b\ud800c" + "x" * 1000


@api_view(["GET"])
def hostile_scope(request: Request) -> Response:
    """Notes a scope PostgreSQL cannot store as is, then fails like a refused request."""
    note_access(request, scope={"user_id": HOSTILE, "agent_id": [HOSTILE] * 100})
    raise ValidationError("refused")


urlpatterns = [path("v1/hostile/", hostile_scope), path("", include(config.urls))]


def unauthenticated_row(response: HttpResponseBase) -> AccessLog:
    """The log row of a request without a project (readable without a tenant context).

    The context is cleared explicitly: in a test, an earlier request's tenant (SET LOCAL)
    lasts until the test's own transaction ends.
    """
    with project_context(None):
        return AccessLog.objects.get(request_id=response["X-Request-ID"])


class AccessLogTestCase(BaseTestCase):
    def setUp(self) -> None:
        response = self.client.get("/v1/ping/", headers=auth(self.alice.raw))
        self.request_id = response["X-Request-ID"]
        self.project_id = self.alice.key.project_id

    def row(self, response: HttpResponseBase) -> AccessLog:
        with project_context(self.project_id):
            return AccessLog.objects.get(request_id=response["X-Request-ID"])

    def test_it_writes_one_row_per_request(self) -> None:
        with project_context(self.project_id):
            row = AccessLog.objects.get(request_id=self.request_id)
        assert row.path == "/v1/ping/"
        assert row.status == 200
        assert row.duration_ms >= 0
        assert row.key_prefix == self.alice.key.prefix

    def test_it_logs_unauthenticated_requests_where_no_tenant_can_read_them(self) -> None:
        with self.assertNoLogs("audit.middleware", level="ERROR"):
            response = self.client.get("/v1/ping/", headers=auth("eng_wrong"))
        assert response.status_code == 401
        for project_id in (self.project_id, self.charlie.key.project_id):
            with project_context(project_id):
                assert not AccessLog.objects.filter(request_id=response["X-Request-ID"]).exists()
        assert unauthenticated_row(response).project_id is None

    def test_it_logs_a_request_whose_path_holds_a_nul(self) -> None:
        with self.assertNoLogs("audit.middleware", level="ERROR"):
            response = self.client.get("/v1/ping/%00", headers=auth(self.alice.raw))
        row = unauthenticated_row(response)
        assert (row.path, row.status) == ("/v1/ping/", response.status_code)

    @override_settings(ROOT_URLCONF=__name__)
    def test_it_logs_a_failed_request_whose_scope_cannot_be_stored_as_is(self) -> None:
        with self.assertNoLogs("audit.middleware", level="ERROR"):
            response = self.client.get("/v1/hostile/", headers=auth(self.alice.raw))
        assert response.status_code == 400
        scope = self.row(response).scope
        assert scope["user_id"] == "ab\ufffdc" + "x" * 196
        assert len(scope["agent_id"]) == 20
        assert scope["agent_id"][0] == scope["user_id"]

    def test_it_logs_a_request_with_an_overlong_method(self) -> None:
        with self.assertNoLogs("audit.middleware", level="ERROR"):
            response = self.client.generic(
                "VERYLONGMETHOD", "/v1/ping/", headers=auth(self.alice.raw)
            )
        assert response.status_code == 405
        assert self.row(response).method == "VERYLONGME"

    def test_it_records_the_prefix_of_an_unknown_key(self) -> None:
        response = self.client.get("/v1/ping/", headers=auth("eng_unknownPrefix" + "x" * 30))
        assert response.status_code == 401
        row = unauthenticated_row(response)
        assert (row.key_prefix, row.api_key_id) == ("eng_unknownPrefi", None)

    def test_it_records_the_prefix_of_a_revoked_key(self) -> None:
        do_revoke_api_key(self.alice.key)
        response = self.client.get("/v1/ping/", headers=auth(self.alice.raw))
        assert response.status_code == 401
        assert unauthenticated_row(response).key_prefix == self.alice.key.prefix

    def test_it_records_no_prefix_for_something_that_is_not_one_of_our_keys(self) -> None:
        for token in ("hunter2-my-password", "eng_short", "eng_with*stars*in*it"):
            response = self.client.get("/v1/ping/", HTTP_AUTHORIZATION=f"Token {token}")
            assert unauthenticated_row(response).key_prefix == "", token

    def test_it_records_the_endpoint_not_the_path_of_an_unauthenticated_request(self) -> None:
        # The path names an end user; a request without a project keeps only the route.
        response = self.client.delete("/v2/entities/user/alice/", headers=auth("eng_wrong"))
        assert response.status_code == 401
        assert unauthenticated_row(response).path == "/v2/entities/<str:entity_type>/<scope:name>/"

    @override_settings(ENGRAM_MAX_BODY_BYTES=1024)
    def test_it_records_the_endpoint_of_a_request_refused_before_authentication(self) -> None:
        response = self.client.generic(
            "DELETE", "/v2/entities/user/alice/", "x" * 2048, headers=auth(self.alice.raw)
        )
        assert response.status_code == 413
        assert unauthenticated_row(response).path == "/v2/entities/<str:entity_type>/<scope:name>/"

    def test_it_records_the_client_address(self) -> None:
        response = self.client.get(
            "/v1/ping/", headers=auth(self.alice.raw), REMOTE_ADDR="198.51.100.4"
        )
        assert self.row(response).client_address == "198.51.100.4"

    def test_it_ignores_x_forwarded_for_unless_proxies_are_trusted(self) -> None:
        headers = {**auth(self.alice.raw), "X-Forwarded-For": "203.0.113.9"}
        response = self.client.get("/v1/ping/", headers=headers, REMOTE_ADDR="10.0.0.2")
        assert self.row(response).client_address == "10.0.0.2"

    def test_it_takes_the_address_the_trusted_proxies_saw(self) -> None:
        # The leftmost entries are whatever the client sent; only the proxies' own are trusted.
        forwarded = "198.51.100.1, 203.0.113.9, 10.0.0.1"
        headers = {**auth(self.alice.raw), "X-Forwarded-For": forwarded}
        for hops, expected in ((1, "10.0.0.1"), (2, "203.0.113.9"), (5, "198.51.100.1")):
            with override_settings(ENGRAM_TRUSTED_PROXY_HOPS=hops):
                response = self.client.get("/v1/ping/", headers=headers, REMOTE_ADDR="10.0.0.2")
            assert self.row(response).client_address == expected, hops

    @override_settings(ENGRAM_TRUSTED_PROXY_HOPS=1)
    def test_it_falls_back_to_the_peer_when_the_forwarded_address_is_not_an_address(self) -> None:
        headers = {**auth(self.alice.raw), "X-Forwarded-For": "unknown"}
        response = self.client.get("/v1/ping/", headers=headers, REMOTE_ADDR="10.0.0.2")
        assert self.row(response).client_address == "10.0.0.2"

    def test_it_keeps_its_own_request_id_and_stores_the_callers_beside_it(self) -> None:
        headers = {**auth(self.alice.raw), "X-Request-ID": "abc-123"}
        response = self.client.get("/v1/ping/", headers=headers)
        row = self.row(response)
        assert len(row.request_id) == 32
        assert row.request_id != "abc-123"
        assert row.client_request_id == "abc-123"

    def test_it_does_not_store_a_caller_request_id_of_the_wrong_shape(self) -> None:
        headers = {**auth(self.alice.raw), "X-Request-ID": "bad id!\n"}
        assert self.row(self.client.get("/v1/ping/", headers=headers)).client_request_id == ""

    def test_it_records_the_clients_identity_headers(self) -> None:
        identity = {
            "X-Mem0-Client": "langchain/0.3.1, mem0-python/2.2.1",
            "X-Mem0-Source": "cli",
            "X-Application": "my-app",
            "X-Mem0-Client-Language": "python",
            "X-Mem0-Client-Version": "0.4.0",
            "X-Mem0-Caller-Type": "agent",
        }
        headers = {**auth(self.alice.raw), **identity, "X-Other": "not kept"}
        response = self.client.get("/v1/ping/", headers=headers)
        assert response.status_code == 200
        assert self.row(response).client == identity

    def test_it_records_no_client_headers_when_none_are_sent(self) -> None:
        with project_context(self.project_id):
            assert AccessLog.objects.get(request_id=self.request_id).client == {}

    def test_it_sanitises_and_caps_the_client_headers(self) -> None:
        headers = {**auth(self.alice.raw), "X-Mem0-Client": HOSTILE, "X-Application": "ok"}
        response = self.client.get("/v1/ping/", headers=headers)
        client = self.row(response).client
        assert client["X-Mem0-Client"] == ("ab\ufffdc" + "x" * 1000)[:200]
        assert client["X-Application"] == "ok"

    def test_it_keeps_the_client_headers_of_an_unauthenticated_request(self) -> None:
        headers = {**auth("eng_wrong"), "X-Mem0-Client": "mem0-python/2.2.1"}
        response = self.client.get("/v1/ping/", headers=headers)
        assert response.status_code == 401
        assert unauthenticated_row(response).client == {"X-Mem0-Client": "mem0-python/2.2.1"}

    def test_it_records_the_client_headers_of_a_write_in_its_own_transaction(self) -> None:
        headers = {**auth(self.alice.raw), "X-Mem0-Client": "mem0-python/2.2.1"}
        body = {"messages": "I like tea", "user_id": "alice", "infer": False}
        response = self.client.post(
            "/v3/memories/add/", body, content_type="application/json", headers=headers
        )
        assert response.status_code == 200
        row = self.row(response)
        assert (row.status, row.client) == (200, {"X-Mem0-Client": "mem0-python/2.2.1"})

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


class UnauthenticatedRowsTestCase(BaseTestCase):
    """Rows without a project are operator telemetry: readable outside any tenant context."""

    def test_it_shows_them_without_a_tenant_context_only(self) -> None:
        response = self.client.get("/v1/ping/")
        assert unauthenticated_row(response).status == 401
        with project_context(self.alice.key.project_id):
            assert not AccessLog.objects.filter(project__isnull=True).exists()

    def test_it_still_hides_project_rows_without_a_tenant_context(self) -> None:
        self.client.get("/v1/ping/", headers=auth(self.alice.raw))
        with project_context(None):
            assert not AccessLog.objects.filter(project__isnull=False).exists()


@override_settings(ENGRAM_MAX_BODY_BYTES=1024)
class RefusedBodyTestCase(BaseTestCase):
    def test_it_logs_a_request_whose_body_is_refused(self) -> None:
        response = self.client.post(
            "/v1/ping/", "x" * 2048, content_type="application/json", headers=auth(self.alice.raw)
        )
        assert response.status_code == 413
        assert unauthenticated_row(response).status == 413
