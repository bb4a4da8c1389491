"""POST /v1/users/{user_id}/dashboard-link/: an application mints its user's dashboard link."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from unittest import mock

from django.test import override_settings

from tenants.actions import do_revoke_api_key
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts

NOW = 1_900_000_000  # a fixed clock (time.time), so expiry is exact


class DashboardLinkTestCase(BaseTestCase):
    def mint(self, body: Any = None, user: str = "alice", **kwargs: Any) -> Any:
        with mock.patch("time.time", return_value=NOW):
            return self.call("post", f"/v1/users/{user}/dashboard-link/", body, **kwargs)

    def expiry(self, response: Any) -> float:
        assert response.status_code == 200, response.content
        return datetime.fromisoformat(response.json()["expires_at"]).timestamp() - NOW

    def test_it_mints_an_absolute_link_valid_for_an_hour_by_default(self) -> None:
        response = self.mint()
        body = response.json()
        assert set(body) == {"url", "expires_at"}
        assert body["url"].startswith("http://testserver/me/")
        assert self.expiry(response) == 3600
        assert self.expiry(self.mint({})) == 3600

    def test_it_takes_a_lifetime_from_a_minute_to_a_week(self) -> None:
        assert self.expiry(self.mint({"expires_in": 60})) == 60
        assert self.expiry(self.mint({"expires_in": 604800})) == 604800

    def test_it_refuses_any_other_lifetime_with_a_detail(self) -> None:
        for bad in (59, 604801, 0, -5, "3600", 3600.5, True, None, [3600], {"s": 1}, 10**30):
            response = self.mint({"expires_in": bad})
            assert response.status_code == 400, bad
            assert response.json()["detail"].startswith("expires_in"), bad

    def test_it_refuses_a_body_that_is_not_an_object(self) -> None:
        bodies: list[Any] = [[], "expires", 3600]
        for body in bodies:
            response = self.mint(body)
            assert response.status_code == 400
            assert response.json()["detail"]

    def test_it_refuses_an_overlong_user_id(self) -> None:
        response = self.mint(user="u" * 256)
        assert response.status_code == 400
        assert response.json()["detail"].startswith("user_id")

    def test_it_needs_an_api_key(self) -> None:
        response = self.client.post("/v1/users/alice/dashboard-link/")
        assert response.status_code == 401
        assert "detail" in response.json()

    @override_settings(ENGRAM_PUBLIC_URL="https://memory.example.com")
    def test_it_starts_with_the_public_url_when_one_is_set(self) -> None:
        url = self.mint().json()["url"]
        assert url.startswith("https://memory.example.com/me/")

    def test_it_only_shows_the_minting_keys_project_even_for_the_same_user_id(self) -> None:
        with project_context(self.alice.key.project_id):
            add_texts(self.alice.key.project, ["Alice of acme likes tea"], user_id="alice")
        with project_context(self.charlie.key.project_id):
            add_texts(self.charlie.key.project, ["Alice of globex likes jazz"], user_id="alice")
        url = self.call("post", "/v1/users/alice/dashboard-link/", who=self.charlie).json()["url"]
        page = self.client.get(url)
        assert page.status_code == 200
        assert b"Alice of globex likes jazz" in page.content
        assert b"Alice of acme" not in page.content

    def test_revoking_the_key_revokes_its_links(self) -> None:
        url = self.call("post", "/v1/users/alice/dashboard-link/").json()["url"]
        assert self.client.get(url).status_code == 200
        do_revoke_api_key(self.alice.key)
        page = self.client.get(url)
        assert page.status_code == 403
        assert b"revoked" in page.content

    def test_it_is_in_the_openapi_schema(self) -> None:
        schema = self.client.get("/api/schema/", headers={"Accept": "application/json"}).json()
        operation = schema["paths"]["/v1/users/{user_id}/dashboard-link/"]["post"]
        assert set(operation["responses"]) >= {"200", "400", "401"}
