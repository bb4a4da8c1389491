"""The operator dashboard's Settings page (memory/web/settings.py): the project's settings and
the organization's members, written through the same actions as the API."""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.urls import reverse

from tenants.models import Membership, Project
from tests.base import BaseTestCase

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def member(name: str, organization: Any, role: str) -> User:
    user = get_user_model().objects.create_user(name, email=f"{name}@example.com", password="pw")
    Membership.objects.create(user=user, organization=organization, role=role)
    return user


class SettingsPageTestCase(BaseTestCase):
    """Olivia owns Alice's organization, Adam administers it, Rita only reads it; Oscar owns
    Charlie's."""

    olivia: ClassVar[User]
    adam: ClassVar[User]
    rita: ClassVar[User]
    oscar: ClassVar[User]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        organization = cls.alice.key.project.organization
        cls.olivia = member("olivia", organization, Membership.Role.OWNER)
        cls.adam = member("adam", organization, Membership.Role.ADMIN)
        cls.rita = member("rita", organization, Membership.Role.READER)
        cls.oscar = member("oscar", cls.charlie.key.project.organization, Membership.Role.OWNER)

    def url(self, name: str = "settings") -> str:
        return reverse(f"web:{name}", kwargs={"project_id": self.alice.key.project_id})

    def post(self, user: User, data: dict[str, Any], name: str = "settings") -> Any:
        self.client.force_login(user)
        return self.client.post(self.url(name), data)

    def project(self) -> Project:
        return Project.objects.get(pk=self.alice.key.project_id)

    def settings(self, **changes: Any) -> dict[str, Any]:
        return {"name": "main", "custom_instructions": "", "custom_categories": "", **changes}

    def test_an_admin_saves_the_settings_extraction_reads(self) -> None:
        data = self.settings(
            custom_instructions="Only food.",
            custom_categories="travel: Trips and places\nfood\n",
            includes="Meals and restaurants.",
            excludes="Anything about health.",
            deleted_retention_days="7",
        )
        response = self.post(self.adam, data)
        assert (response.status_code, response["Location"]) == (302, self.url())
        project = self.project()
        assert project.custom_instructions == "Only food."
        assert project.custom_categories == [{"travel": "Trips and places"}, "food"]
        assert (project.includes, project.excludes) == (
            "Meals and restaurants.",
            "Anything about health.",
        )
        assert (project.deleted_retention_days, project.event_retention_days) == (7, None)
        page = self.client.get(self.url())
        assert "Settings saved" in page.content.decode()
        assert page.context["form"]["custom_categories"].value() == "travel: Trips and places\nfood"

    def test_a_reader_sees_the_settings_read_only(self) -> None:
        self.client.force_login(self.rita)
        page = self.client.get(self.url()).content.decode()
        assert "read-only access" in page and "Save settings" not in page
        response = self.post(self.rita, self.settings(custom_instructions="sneaky"))
        assert response.status_code == 403
        assert self.project().custom_instructions == ""

    def test_it_validates_ownership(self) -> None:
        self.client.force_login(self.oscar)
        assert self.client.get(self.url()).status_code == 404
        assert self.post(self.oscar, self.settings(name="taken")).status_code == 404
        assert self.project().name == "main"

    def test_it_shows_bad_input_and_changes_nothing(self) -> None:
        for data in (
            self.settings(custom_categories="food\nFood"),
            self.settings(deleted_retention_days="-1"),
            self.settings(name=""),
        ):
            assert self.post(self.olivia, data).status_code == 400, data
        assert self.project().custom_categories == []

    def test_it_escapes_what_users_wrote(self) -> None:
        self.post(self.olivia, self.settings(custom_instructions=HOSTILE, description=HOSTILE))
        self.client.force_login(self.rita)
        page = self.client.get(self.url()).content.decode()
        assert HOSTILE not in page and ESCAPED in page

    def test_an_owner_adds_changes_and_removes_a_member(self) -> None:
        get_user_model().objects.create_user("bob", email="bob@example.com")
        add = {"email": "bob@example.com", "role": "admin"}
        assert self.post(self.olivia, add, "member_add").status_code == 302
        assert Membership.objects.get(user__username="bob").role == "admin"
        change = {"email": "bob@example.com", "role": "reader"}
        self.post(self.olivia, change, "member_change")
        assert Membership.objects.get(user__username="bob").role == "reader"
        self.post(self.olivia, {**change, "remove": "1"}, "member_change")
        assert not Membership.objects.filter(user__username="bob").exists()

    def test_removing_a_member_takes_a_confirmation(self) -> None:
        bob = get_user_model().objects.create_user("bob", email="bob@example.com")
        self.post(self.olivia, {"email": "bob@example.com", "role": "admin"}, "member_add")
        member = Membership.objects.get(user=bob)
        page = self.client.get(self.url()).content.decode()
        remove = reverse(
            "web:member_remove",
            kwargs={"project_id": self.alice.key.project_id, "membership_id": member.pk},
        )
        assert f'href="{remove}"' in page and 'name="remove"' not in page  # a link, no button
        confirm = self.client.get(remove)
        assert confirm.status_code == 200
        assert b"Remove this member" in confirm.content and b"bob@example.com" in confirm.content
        assert Membership.objects.filter(user=bob).exists()  # a GET changes nothing
        self.client.force_login(self.rita)  # a reader may not
        assert self.client.post(remove).status_code == 403
        self.client.force_login(self.olivia)
        done = self.client.post(remove, follow=True)
        assert b"is no longer a member" in done.content
        assert not Membership.objects.filter(user=bob).exists()
        assert self.client.get(remove).status_code == 404

    def test_an_unknown_email_is_shown_on_the_form(self) -> None:
        response = self.post(
            self.olivia, {"email": "nobody@example.com", "role": "reader"}, "member_add"
        )
        assert response.status_code == 400
        assert "No engram user has the email" in response.content.decode()

    def test_only_owners_change_members(self) -> None:
        get_user_model().objects.create_user("bob", email="bob@example.com")
        add = {"email": "bob@example.com", "role": "owner"}
        assert self.post(self.adam, add, "member_add").status_code == 403
        assert self.post(self.rita, add, "member_add").status_code == 403
        demote = {"email": "olivia@example.com", "role": "reader"}
        assert self.post(self.adam, demote, "member_change").status_code == 403
        assert not Membership.objects.filter(user__username="bob").exists()
        assert Membership.objects.get(user=self.olivia).role == "owner"

    def test_it_keeps_the_last_owner(self) -> None:
        demote = {"email": "olivia@example.com", "role": "reader"}
        response = self.post(self.olivia, demote, "member_change")
        assert response.status_code == 302
        assert Membership.objects.get(user=self.olivia).role == "owner"
        page = self.client.get(self.url()).content.decode()
        assert "last owner" in page
