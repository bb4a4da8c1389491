"""The Platform's project and member endpoints on engram's project and organization."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from memory.models import MemoryEvent
from tenants.db import project_context
from tenants.models import Membership, Project
from tests.base import BaseTestCase
from tests.factory import make_key


class ProjectsApiTestCase(BaseTestCase):
    """Alice's key was made at the server (no creator): it acts as an admin."""

    def setUp(self) -> None:
        self.project = self.alice.key.project
        self.org = self.project.organization
        self.url = f"/api/v1/orgs/organizations/{self.org.pk}/projects/{self.project.pk}/"

    def member(self, name: str, role: str) -> User:
        user = User.objects.create_user(name, email=f"{name}@example.com")
        Membership.objects.create(organization=self.org, user=user, role=role)
        return user

    def owners_key(self) -> Any:
        """A key made by an owner of the organization (olivia): it may change members."""
        return make_key("acme", "main", created_by=self.member("olivia", "owner"))

    def refreshed(self) -> Project:
        return Project.objects.get(pk=self.project.pk)

    def patch(self, body: dict[str, Any], **kwargs: Any) -> Any:
        return self.call("patch", self.url, body, **kwargs)

    # -- the project ---------------------------------------------------------------------------

    def test_it_answers_the_project_with_engrams_settings(self) -> None:
        self.member("olga", "owner")
        body = self.call("get", self.url).json()
        assert body["project_id"] == str(self.project.pk)
        assert body["name"] == "main"
        assert body["members"] == [
            {"username": "olga", "email": "olga@example.com", "role": "OWNER"}
        ]
        assert (body["multilingual"], body["decay"], body["user_role"]) == (True, False, "ADMIN")
        assert body["custom_categories"] == []

    def test_it_answers_only_the_fields_asked_for(self) -> None:
        response = self.client.get(
            self.url + "?fields=custom_instructions&fields=decay,name",
            headers={"Authorization": f"Token {self.alice.raw}"},
        )
        assert set(response.json()) == {"custom_instructions", "decay", "name"}

    def test_it_refuses_an_unknown_field_name(self) -> None:
        response = self.call("get", self.url + "?fields=nonsense")
        assert response.status_code == 400
        assert "nonsense" in response.json()["detail"]

    def test_it_validates_ownership(self) -> None:
        other = self.charlie.key.project
        paths = [
            f"/api/v1/orgs/organizations/{other.organization_id}/projects/{other.pk}/",
            f"/api/v1/orgs/organizations/{self.org.pk}/projects/{other.pk}/",
            f"/api/v1/orgs/organizations/{other.organization_id}/projects/{self.project.pk}/",
            f"/api/v1/orgs/organizations/not-a-uuid/projects/{self.project.pk}/",
        ]
        User.objects.create_user("bob", email="bob@example.com")
        for path in paths:
            assert self.call("get", path).status_code == 404, path
            assert self.call("patch", path, {"name": "x"}).status_code == 404, path
            assert self.call("get", path + "members/").status_code == 404, path
            body = {"email": "bob@example.com"}
            assert self.call("post", path + "members/", body).status_code == 404, path
        assert self.refreshed().name == "main"
        assert not Membership.objects.exists()

    def test_it_updates_the_settings_extraction_reads(self) -> None:
        categories = [{"travel": "Trips and places"}, "food"]
        response = self.patch(
            {
                "custom_instructions": "Only remember food.",
                "custom_categories": categories,
                "deleted_retention_days": 7,
                "org_id": str(self.org.pk),
                "project_id": str(self.project.pk),
            }
        )
        assert response.json() == {"message": "Project updated successfully"}
        project = self.refreshed()
        assert project.custom_instructions == "Only remember food."
        assert (project.custom_categories, project.deleted_retention_days) == (categories, 7)

    def test_includes_and_excludes_are_what_every_add_request_is_extracted_with(self) -> None:
        response = self.patch({"includes": "Only food.", "excludes": "Never health."})
        assert response.status_code == 200, response.content
        assert self.call("get", self.url + "?fields=includes,excludes").json() == {
            "includes": "Only food.",
            "excludes": "Never health.",
        }
        messages = [{"role": "user", "content": "I love ramen and I have asthma."}]
        queued = self.call("post", "/v3/memories/add/", {"messages": messages, "user_id": "u"})
        own = self.call(
            "post",
            "/v3/memories/add/",
            {"messages": messages, "user_id": "u", "includes": "Only sports."},
        )
        with project_context(self.project.pk):
            first = MemoryEvent.objects.get(pk=queued.json()["event_id"]).payload
            second = MemoryEvent.objects.get(pk=own.json()["event_id"]).payload
        assert (first["includes"], first["excludes"]) == ("Only food.", "Never health.")
        assert (second["includes"], second["excludes"]) == ("Only sports.", "Never health.")

    def test_it_accepts_a_fixed_setting_at_engrams_value(self) -> None:
        response = self.patch({"decay": False, "multilingual": True, "custom_instructions": "x"})
        assert response.status_code == 200
        assert self.refreshed().custom_instructions == "x"

    def test_it_refuses_a_setting_engram_cannot_honour_naming_it(self) -> None:
        cases = {
            "memory_depth": "deep",
            "usecase_setting": "support",
            "inclusion_prompt": "food",
            "exclusion_prompt": "health",
            "decay": True,
            "multilingual": False,
            "agent_custom_instructions": "Be brief.",
            "colour": "blue",
        }
        for field, value in cases.items():
            response = self.patch({field: value, "custom_instructions": "changed"})
            assert response.status_code == 400, field
            assert response.json()["detail"].startswith(f"{field}:"), response.json()
        assert self.refreshed().custom_instructions == ""

    def test_it_refuses_an_empty_update_and_bad_values(self) -> None:
        for body in (
            {},
            {"decay": False},
            {"custom_categories": "food"},
            {"custom_categories": [{"a": 1}]},
            {"custom_categories": ["food", "Food"]},
            {"deleted_retention_days": -1},
            {"name": ""},
            {"project_id": str(self.charlie.key.project_id), "name": "x"},
        ):
            assert self.patch(body).status_code == 400, body
        assert self.refreshed().name == "main"

    def test_it_refuses_a_name_taken_in_the_organization(self) -> None:
        make_key("acme", "other")
        response = self.patch({"name": "other"})
        assert response.status_code == 409
        assert response.json()["detail"].startswith("name:")

    def test_a_key_acts_with_its_creators_role(self) -> None:
        reader = self.member("rita", "reader")
        key = make_key("acme", "main", created_by=reader)
        response = self.patch({"custom_instructions": "x"}, who=key)
        assert response.status_code == 403
        assert self.call("get", self.url, who=key).json()["user_role"] == "READER"
        Membership.objects.filter(user=reader).update(role="admin")
        assert self.patch({"custom_instructions": "x"}, who=key).status_code == 200

    def test_it_refuses_to_delete_the_project_and_says_where(self) -> None:
        response = self.call("delete", self.url)
        assert response.status_code == 403
        assert "/admin/tenants/project/" in response.json()["detail"]
        assert Project.objects.filter(pk=self.project.pk).exists()

    def test_it_creates_a_project_in_the_keys_organization(self) -> None:
        path = f"/api/v1/orgs/organizations/{self.org.pk}/projects/"
        response = self.call("post", path, {"name": "second", "description": "Tests"})
        assert response.status_code == 200
        created = Project.objects.get(pk=response.json()["project_id"])
        assert (created.organization_id, created.name, created.description) == (
            self.org.pk,
            "second",
            "Tests",
        )
        assert self.call("post", path, {"name": "second"}).status_code == 409

    def test_it_refuses_an_unknown_key_when_creating_a_project(self) -> None:
        path = f"/api/v1/orgs/organizations/{self.org.pk}/projects/"
        response = self.call("post", path, {"name": "second", "colour": "blue"})
        assert response.status_code == 400
        assert response.json()["detail"] == "colour: unknown field; known: name, description."
        elsewhere = {"name": "second", "org_id": str(self.charlie.key.project.organization_id)}
        assert self.call("post", path, elsewhere).status_code == 400
        assert not Project.objects.filter(name="second").exists()
        ids = {"org_id": str(self.org.pk), "project_id": str(self.project.pk)}
        assert self.call("post", path, {"name": "second", **ids}).status_code == 200

    def test_it_creates_no_project_in_another_organization(self) -> None:
        path = f"/api/v1/orgs/organizations/{self.charlie.key.project.organization_id}/projects/"
        assert self.call("post", path, {"name": "intruder"}).status_code == 404
        assert not Project.objects.filter(name="intruder").exists()

    # -- members -------------------------------------------------------------------------------

    def test_it_adds_changes_and_removes_a_member_by_email(self) -> None:
        key = self.owners_key()
        User.objects.create_user("bob", email="Bob@Example.com")
        members = self.url + "members/"
        assert self.call("post", members, {"email": "bob@example.com"}, who=key).status_code == 200
        assert self.call("get", members).json()["members"][0] == {
            "username": "bob",
            "email": "Bob@example.com",  # as Django keeps it (the domain in lower case)
            "role": "READER",
        }
        body = {"email": "bob@example.com", "role": "OWNER"}
        response = self.call("put", members, body, who=key)
        assert response.json() == {"message": "User role updated successfully."}
        assert Membership.objects.get(user__username="bob").role == "owner"
        response = self.client.delete(
            members + "?email=bob@example.com", headers={"Authorization": f"Token {key.raw}"}
        )
        assert response.status_code == 200
        assert not Membership.objects.filter(user__username="bob").exists()

    def test_it_refuses_an_unknown_email_and_changes_nothing(self) -> None:
        key = self.owners_key()
        body = {"email": "nobody@example.com"}
        response = self.call("post", self.url + "members/", body, who=key)
        assert response.status_code == 404
        assert response.json()["detail"].startswith("No engram user has the email")
        assert Membership.objects.filter(organization=self.org).count() == 1  # olivia

    def test_it_answers_404_for_a_member_not_in_the_organization(self) -> None:
        User.objects.create_user("bob", email="bob@example.com")
        body = {"email": "bob@example.com", "role": "READER"}
        assert (
            self.call("put", self.url + "members/", body, who=self.owners_key()).status_code == 404
        )

    def test_it_keeps_the_last_owner(self) -> None:
        key = self.owners_key()
        members = self.url + "members/"
        body = {"email": "olivia@example.com", "role": "READER"}
        assert self.call("put", members, body, who=key).status_code == 409
        gone = members + "?email=olivia@example.com"
        assert self.call("delete", gone, who=key).status_code == 409
        assert Membership.objects.get(user__username="olivia").role == "owner"

    def test_only_an_owners_key_changes_members(self) -> None:
        admin = self.member("adam", "admin")
        User.objects.create_user("bob", email="bob@example.com")
        body = {"email": "bob@example.com", "role": "OWNER"}
        # An admin's key, and a key made at the server (no creator: an application's), which
        # may change settings but must not hand out access to the organization.
        for key in (make_key("acme", "main", created_by=admin), self.alice):
            response = self.call("post", self.url + "members/", body, who=key)
            assert response.status_code == 403
            assert self.call("get", self.url + "members/", who=key).status_code == 200
        assert self.patch({"custom_instructions": "x"}).status_code == 200
        assert not Membership.objects.filter(user__username="bob").exists()

    def test_it_refuses_an_unknown_role(self) -> None:
        key = self.owners_key()
        User.objects.create_user("bob", email="bob@example.com")
        body = {"email": "bob@example.com", "role": "GOD"}
        assert self.call("post", self.url + "members/", body, who=key).status_code == 400
        assert not Membership.objects.filter(user__username="bob").exists()
