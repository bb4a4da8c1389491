"""The access log in the Django admin: unauthenticated requests, for superusers, read-only."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from tests.base import BaseTestCase
from tests.factory import auth


class AccessLogAdminTestCase(BaseTestCase):
    URL = "/admin/audit/accesslog/"

    def setUp(self) -> None:
        # Only refused requests here: a successful one leaves its tenant set (SET LOCAL) until
        # the test's transaction ends, which a real request never does.
        self.refused = self.client.get("/v1/ping/", headers=auth("eng_probingAKey1" + "x" * 31))
        self.admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")

    def test_it_lists_unauthenticated_requests_to_superusers(self) -> None:
        self.client.force_login(self.admin)
        response = self.client.get(self.URL)
        assert response.status_code == 200
        page = response.content.decode()
        assert self.refused["X-Request-ID"] in page
        assert "eng_probingAKey1" in page
        found = self.client.get(self.URL, {"q": self.refused["X-Request-ID"]})
        assert found.context["cl"].result_count == 1

    def test_it_shows_a_row_read_only(self) -> None:
        self.client.force_login(self.admin)
        listing = self.client.get(self.URL)
        row = listing.context["cl"].result_list[0]
        response = self.client.get(f"{self.URL}{row.pk}/change/")
        assert response.status_code == 200
        assert b'name="_save"' not in response.content
        assert self.client.post(f"{self.URL}{row.pk}/delete/").status_code == 403

    def test_it_hides_the_log_from_staff_who_are_not_superusers(self) -> None:
        staff = get_user_model().objects.create_user("staff", password="pw", is_staff=True)
        staff.user_permissions.set(staff.user_permissions.model.objects.all())
        self.client.force_login(staff)
        assert self.client.get(self.URL).status_code == 403
