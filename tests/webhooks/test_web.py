"""The operator's Webhooks page: state and deliveries for everyone, repairs for editors."""

from __future__ import annotations

from typing import ClassVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import override_settings

from tenants.db import project_context
from tenants.models import Membership
from tests.base import BaseTestCase
from tests.factory import add_texts
from webhooks import actions
from webhooks.models import Webhook

RECEIVER = "127.0.0.1:8765"


@override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[RECEIVER])
class WebhooksPageTestCase(BaseTestCase):
    owner: ClassVar[User]
    reader: ClassVar[User]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        organization = cls.alice.key.project.organization
        users = get_user_model().objects
        cls.owner = users.create_user("olga", password="pw")
        cls.reader = users.create_user("rita", password="pw")
        Membership.objects.create(user=cls.owner, organization=organization, role="owner")
        Membership.objects.create(user=cls.reader, organization=organization, role="reader")

    def setUp(self) -> None:
        self.project = self.alice.key.project
        with project_context(self.project.pk):
            self.hook = actions.do_create_webhook(
                self.project.pk, name="crm sync", url=f"http://{RECEIVER}/h",
                event_types=["memory_add"],
            )  # fmt: skip
            actions.do_update_webhook(self.hook, is_active=False)
            Webhook.objects.filter(pk=self.hook.pk).update(disabled_reason="20 failures: 500")
            add_texts(self.project, ["Alice likes tea"], user_id="alice")
        self.page = f"/dashboard/p/{self.project.pk}/webhooks/"

    def test_a_reader_sees_state_and_deliveries_but_changes_nothing(self) -> None:
        with project_context(self.project.pk):
            actions.do_enable_webhook(self.hook)
            add_texts(self.project, ["Alice likes coffee"], user_id="alice")
        self.client.force_login(self.reader)
        page = self.client.get(self.page)
        assert page.status_code == 200
        html = page.content.decode()
        assert "crm sync" in html and "memory_add" in html and "PENDING" in html
        assert "Rotate secret" not in html and self.hook.secret not in html
        enable = f"{self.page}{self.hook.pk}/enable/"
        assert self.client.post(enable).status_code == 403
        assert self.client.post(f"{self.page}{self.hook.pk}/rotate/").status_code == 403

    def test_an_owner_enables_a_disabled_webhook_and_rotates_its_secret(self) -> None:
        self.client.force_login(self.owner)
        html = self.client.get(self.page).content.decode()
        assert "20 failures: 500" in html and "Enable" in html
        with self.captureOnCommitCallbacks(execute=False):
            response = self.client.post(f"{self.page}{self.hook.pk}/enable/")
        assert response.status_code == 302
        # Rotating takes a confirmation: the list links to it, and a GET changes nothing.
        rotate = f"{self.page}{self.hook.pk}/rotate/"
        assert f'href="{rotate}"' in self.client.get(self.page).content.decode()
        confirm = self.client.get(rotate)
        assert confirm.status_code == 200 and b"Rotate the secret" in confirm.content
        with project_context(self.project.pk):
            assert Webhook.objects.get(pk=self.hook.pk).secret == self.hook.secret
        rotated = self.client.post(rotate)
        assert rotated.status_code == 303
        with project_context(self.project.pk):
            hook = Webhook.objects.get(pk=self.hook.pk)
        assert hook.enabled and hook.secret != self.hook.secret
        shown = self.client.get(self.page).content.decode()
        assert hook.secret in shown
        assert hook.secret not in self.client.get(self.page).content.decode()  # once

    def test_another_projects_webhook_is_not_found(self) -> None:
        self.client.force_login(self.owner)
        other = self.charlie.key.project
        assert self.client.get(f"/dashboard/p/{other.pk}/webhooks/").status_code == 404
        with project_context(other.pk):
            theirs = actions.do_create_webhook(
                other.pk, name="x", url=f"http://{RECEIVER}/h", event_types=["memory_add"]
            )
        assert self.client.post(f"{self.page}{theirs.pk}/rotate/").status_code == 404
