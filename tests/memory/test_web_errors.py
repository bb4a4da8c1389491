"""Error pages (memory/web/errors.py): the dashboards, the end-user pages and the admin answer
404, 403, a CSRF failure, 500 and 503 with an HTML page in their style and a link back; every
other path keeps the API's JSON errors; /favicon.ico is the static icon."""

from __future__ import annotations

from typing import Any, ClassVar
from unittest import mock

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import InterfaceError
from django.test import Client, RequestFactory
from django.urls import reverse

from memory.web import errors
from tenants import links
from tenants.models import ApiKey, Membership
from tests.base import BaseTestCase
from tests.factory import auth

EXPIRED = "This page has expired"


class WebErrorsTestCase(BaseTestCase):
    """Olivia owns Alice's organization; Rita only reads it."""

    olivia: ClassVar[User]
    rita: ClassVar[User]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        organization = cls.alice.key.project.organization
        users = get_user_model().objects
        cls.olivia = users.create_user("olivia", password="pw")
        cls.rita = users.create_user("rita", password="pw")
        Membership.objects.create(user=cls.olivia, organization=organization, role="owner")
        Membership.objects.create(user=cls.rita, organization=organization, role="reader")

    def assert_page(self, response: Any, status: int, sentence: str) -> str:
        """An HTML error page in the dashboards' style, saying `sentence`, without debug text."""
        assert response.status_code == status
        assert response["Content-Type"] == "text/html; charset=utf-8"
        assert response["Cache-Control"] == "no-store"
        text = str(response.content.decode())
        assert sentence in text
        assert "engram/web.css" in text and '<main id="main"' in text
        assert f"Error {status}" in text
        for debug in ("DEBUG", "Traceback", "CSRF verification failed", "Request aborted"):
            assert debug not in text
        return text

    # --- the operator dashboard --------------------------------------------------------------

    def test_an_unknown_dashboard_path_is_an_html_404(self) -> None:
        text = self.assert_page(
            self.client.get("/dashboard/no/such/page/"), 404, "There is no page at this address"
        )
        assert '<a class="button" href="/dashboard/">Back to the dashboard</a>' in text

    def test_a_project_the_user_may_not_see_is_an_html_404(self) -> None:
        self.client.force_login(self.olivia)
        other = self.charlie.key.project_id
        response = self.client.get(reverse("web:project", kwargs={"project_id": other}))
        self.assert_page(response, 404, "There is no page at this address")

    def test_a_readers_forged_post_is_an_html_403_saying_why(self) -> None:
        self.client.force_login(self.rita)
        url = reverse("web:key_create", kwargs={"project_id": self.alice.key.project_id})
        response = self.client.post(url, {"name": "sneaky"})
        text = self.assert_page(response, 403, "You are not allowed to do this.")
        assert "Readers cannot change anything." in text
        assert not ApiKey.objects.filter(name="sneaky").exists()

    def test_a_form_without_its_csrf_cookie_says_the_page_expired(self) -> None:
        strict = Client(enforce_csrf_checks=True)
        login = reverse("web:login")
        response = strict.post(login, {"username": "olivia", "password": "pw"})
        text = self.assert_page(response, 403, EXPIRED)
        assert "allow cookies for this site" in text
        assert "Reload the page</a>" not in text  # no Referer: nothing to reload but the section
        assert "Back to the dashboard</a>" in text
        assert "_auth_user_id" not in strict.session  # not logged in

    def test_the_expired_page_offers_to_reload_the_page_the_form_was_on(self) -> None:
        strict = Client(enforce_csrf_checks=True)
        login = reverse("web:login")
        came_from = f"http://testserver{login}?next=/dashboard/"
        response = strict.post(login, {"username": "o"}, headers={"Referer": came_from})
        text = self.assert_page(response, 403, EXPIRED)
        assert (
            '<a class="button" href="/dashboard/login/?next=/dashboard/">Reload the page</a>'
            in text
        )
        # Another site's page is never linked.
        elsewhere = strict.post(login, {}, headers={"Referer": "https://evil.example/x"})
        assert "Reload the page</a>" not in self.assert_page(elsewhere, 403, EXPIRED)

    def test_a_server_error_is_an_html_500_with_a_reference(self) -> None:
        client = Client(raise_request_exception=False)
        client.force_login(self.olivia)
        with mock.patch("memory.web.views.member_projects", side_effect=RuntimeError("bug")):
            response = client.get(reverse("web:home"))
        text = self.assert_page(response, 500, "The server failed to show this page.")
        assert f"reference {response['X-Request-ID']}" in text
        assert "bug" not in text

    def test_a_database_outage_is_an_html_503_to_retry(self) -> None:
        client = Client(raise_request_exception=False)
        client.force_login(self.olivia)
        lost = InterfaceError("connection already closed")
        with mock.patch("memory.web.views.member_projects", side_effect=lost):
            response = client.get(reverse("web:home"))
        self.assert_page(response, 503, "The database is unavailable")
        assert response["Retry-After"] == "5"

    # --- the end-user pages and the admin ----------------------------------------------------

    def test_an_end_users_refused_form_says_the_page_expired_and_links_to_their_page(
        self,
    ) -> None:
        token, _ = links.mint(self.alice.key, "alice", 3600)
        home = reverse("web:enduser_home", kwargs={"token": token})
        strict = Client(enforce_csrf_checks=True)
        response = strict.post(reverse("web:enduser_erase", kwargs={"token": token}))
        text = self.assert_page(response, 403, EXPIRED)
        assert f'href="{home}">Back to your memories</a>' in text
        assert "/dashboard/" not in text  # no operator link on an end user's page

    def test_the_end_user_root_without_a_token_asks_for_the_link_again(self) -> None:
        text = self.assert_page(self.client.get("/me/"), 404, "There is no page at this address")
        assert "Open the link the application gave you again." in text
        assert "/dashboard/" not in text

    def test_an_unknown_admin_path_is_an_html_404_back_to_the_admin(self) -> None:
        self.client.force_login(get_user_model().objects.create_superuser("ada", "", "pw"))
        text = self.assert_page(
            self.client.get("/admin/no/such/page/"), 404, "There is no page at this address"
        )
        assert 'href="/admin/">Back to the admin</a>' in text

    # --- the API keeps its JSON ---------------------------------------------------------------

    def test_api_paths_keep_their_json_errors(self) -> None:
        for path in ("/v1/nothing-here/", "/dashboardx/", "/api/nothing/", "/mex/"):
            response = self.client.get(path, headers=auth(self.alice.raw))
            assert response.status_code == 404, path
            assert response["Content-Type"] == "application/json", path
            assert response.json() == {"detail": "Not found."}, path

    def test_errors_raised_off_the_pages_are_json(self) -> None:
        request = RequestFactory().post("/v1/memories/")
        forbidden = errors.permission_denied(request, PermissionError("no"))
        assert (forbidden.status_code, forbidden.content) == (
            403,
            b'{"detail": "You do not have permission to perform this action."}',
        )
        refused = errors.csrf_failure(request, "CSRF cookie not set.")
        assert (refused.status_code, refused.content) == (
            403,
            b'{"detail": "CSRF Failed: CSRF cookie not set."}',
        )
        assert errors.bad_request(request).content == b'{"detail": "Bad request."}'
        try:
            raise RuntimeError("bug")
        except RuntimeError:
            failed = errors.server_error(request)
        assert (failed.status_code, failed.content) == (
            500,
            b'{"detail": "Internal server error."}',
        )

    def test_every_page_root_is_one_the_pages_are_under(self) -> None:
        factory = RequestFactory()
        pages = [
            reverse("web:home"),
            reverse("web:login"),
            reverse("web:project", kwargs={"project_id": self.alice.key.project_id}),
            reverse("web:enduser_home", kwargs={"token": "t"}),
            reverse("admin:index"),
        ]
        for path in pages:
            assert errors.is_page_request(factory.get(path)), path
        for path in ("/v1/memories/", "/v2/memories/search/", "/mcp/", "/api/docs/", "/"):
            assert not errors.is_page_request(factory.get(path)), path

    # --- /favicon.ico ----------------------------------------------------------------------------

    def test_the_favicon_is_the_static_icon(self) -> None:
        response = self.client.get("/favicon.ico")
        assert response.status_code == 302
        assert response["Location"] == "/static/engram/favicon.ico"
        icon = self.client.get(response["Location"])
        assert icon.status_code == 200
        assert icon.getvalue().startswith(b"\x00\x00\x01\x00")  # an ICO
