from __future__ import annotations

from django.contrib.auth import get_user_model
from django.utils import timezone

from audit.models import AccessLog
from tenants.actions import do_revoke_api_key
from tenants.authentication import authenticate_key
from tenants.db import project_context
from tenants.models import ApiKey, Project
from tests.base import BaseTestCase
from tests.factory import auth, make_key


class PingTestCase(BaseTestCase):
    def test_it_answers_a_valid_key_with_its_org_and_project(self) -> None:
        response = self.client.get("/v1/ping/", headers=auth(self.alice.raw))
        assert response.status_code == 200
        project = self.alice.key.project
        assert response.json() == {
            "status": "ok",
            "org_id": str(project.organization_id),
            "project_id": str(project.id),
            "user_email": None,
        }

    def test_it_returns_the_creators_email(self) -> None:
        user = get_user_model().objects.create_user("ann", email="ann@example.com")
        new = make_key("acme", "main", created_by=user)
        response = self.client.get("/v1/ping/", headers=auth(new.raw))
        assert response.json()["user_email"] == "ann@example.com"

    def test_it_accepts_the_bearer_scheme(self) -> None:
        response = self.client.get("/v1/ping/", headers=auth(self.alice.raw, "Bearer"))
        assert response.status_code == 200
        assert response.json()["project_id"] == str(self.alice.key.project_id)

    def test_it_refuses_a_missing_header(self) -> None:
        response = self.client.get("/v1/ping/")
        assert response.status_code == 401
        assert "detail" in response.json()
        assert response["WWW-Authenticate"] == "Token"

    def test_it_refuses_an_unknown_key(self) -> None:
        response = self.client.get("/v1/ping/", headers=auth("eng_" + "x" * 43))
        assert response.status_code == 401
        assert response.json() == {"detail": "Invalid API key."}

    def test_it_refuses_a_key_with_a_known_prefix_but_wrong_secret(self) -> None:
        forged = self.alice.raw[:20] + "A" * (len(self.alice.raw) - 20)
        response = self.client.get("/v1/ping/", headers=auth(forged))
        assert response.status_code == 401

    def test_it_refuses_malformed_headers(self) -> None:
        for header in ("Token", "Basic abc", f"Token {self.alice.raw} extra", "Token\t"):
            response = self.client.get("/v1/ping/", HTTP_AUTHORIZATION=header)
            assert response.status_code == 401, header
            assert response.json()["detail"], header

    def test_it_refuses_a_revoked_key(self) -> None:
        do_revoke_api_key(self.alice.key)
        response = self.client.get("/v1/ping/", headers=auth(self.alice.raw))
        assert response.status_code == 401
        assert response.json() == {"detail": "This API key has been revoked."}

    def test_it_answers_with_a_request_id_of_its_own(self) -> None:
        headers = auth(self.alice.raw)
        response = self.client.get("/v1/ping/", headers={**headers, "X-Request-ID": "abc-123"})
        assert len(response["X-Request-ID"]) == 32
        other = self.client.get("/v1/ping/", headers={**headers, "X-Request-ID": "abc-123"})
        assert other["X-Request-ID"] != response["X-Request-ID"]

    def test_it_records_when_a_key_was_last_used(self) -> None:
        assert self.alice.key.last_used_at is None
        self.client.get("/v1/ping/", headers=auth(self.alice.raw))
        self.alice.key.refresh_from_db()
        assert self.alice.key.last_used_at is not None

    def test_it_logs_the_request_under_the_keys_project(self) -> None:
        response = self.client.get("/v1/ping/", headers=auth(self.alice.raw))
        with project_context(self.alice.key.project_id):
            row = AccessLog.objects.get(request_id=response["X-Request-ID"])
        assert (row.api_key_id, row.status, row.action, row.method) == (
            self.alice.key.pk,
            200,
            "ping",
            "GET",
        )


class KeyLookupTestCase(BaseTestCase):
    def test_it_reads_the_key_and_its_project_as_the_orm_does(self) -> None:
        project = self.alice.key.project
        project.custom_categories = [{"travel": "trips"}]
        project.custom_instructions = "Only facts."
        project.event_retention_days = 30
        project.save()
        ApiKey.objects.filter(pk=self.alice.key.pk).update(last_used_at=timezone.now())
        found = authenticate_key(self.alice.raw)
        expected = ApiKey.objects.select_related("project").get(pk=self.alice.key.pk)
        for model, mine, theirs in (
            (ApiKey, found, expected),
            (Project, found.project, expected.project),
        ):
            for field in model._meta.concrete_fields:
                assert getattr(mine, field.attname) == getattr(theirs, field.attname), field
        assert found.project.custom_categories == [{"travel": "trips"}]
        assert found._state.adding is False and found.project._state.db == "default"
