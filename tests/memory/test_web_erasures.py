"""The operator's erasures (issue #50: the operator could not erase a user, erase a memory for
good or see the erasure list): each after a confirmation, under the operator's name, owners
and admins only."""

from __future__ import annotations

from typing import ClassVar

from django.contrib.auth.models import User
from django.test import TestCase

from audit.models import ErasureRequest
from memory.models import Memory
from tenants.db import project_context
from tenants.models import Project
from tests.factory import add_texts, make_key
from tests.memory.test_web_memories import person


class ErasuresTestCase(TestCase):
    project: ClassVar[Project]
    owner: ClassVar[User]
    reader: ClassVar[User]

    @classmethod
    def setUpTestData(cls) -> None:
        cls.project = make_key("acme", "main").key.project
        cls.owner = person("owen", cls.project.organization, "owner")
        cls.reader = person("rita", cls.project.organization, "reader")

    def setUp(self) -> None:
        with project_context(self.project.pk):
            self.tea, self.oslo = add_texts(
                self.project, ["I drink green tea", "I live in Oslo"], user_id="alice"
            )
            (self.bob,) = add_texts(self.project, ["I keep bees"], user_id="bob")
        self.base = f"/dashboard/p/{self.project.pk}/"

    def memory(self, memory: Memory) -> Memory:
        with project_context(self.project.pk):
            return Memory.objects.get(pk=memory.pk)

    def test_an_operator_erases_one_memory_after_a_confirmation(self) -> None:
        erase = f"{self.base}memories/{self.tea.pk}/erase/"
        self.client.force_login(self.reader)
        assert self.client.get(erase).status_code == 403
        self.client.force_login(self.owner)
        assert erase.encode() in self.client.get(f"{self.base}memories/{self.tea.pk}/").content
        confirm = self.client.get(erase)
        assert confirm.status_code == 200 and b"cannot be undone" in confirm.content
        assert self.memory(self.tea).state == Memory.State.ACTIVE  # a GET changes nothing
        done = self.client.post(erase, follow=True)
        assert b"erased for good" in done.content
        erased = self.memory(self.tea)
        assert (erased.state, erased.text) == (Memory.State.REDACTED, "[redacted]")
        assert self.memory(self.oslo).state == Memory.State.ACTIVE

    def test_an_operator_erases_a_user_after_a_confirmation_and_sees_the_list(self) -> None:
        confirm_url = f"{self.base}users/erase/?user_id=alice"
        self.client.force_login(self.reader)
        assert self.client.get(confirm_url).status_code == 403
        self.client.force_login(self.owner)
        page = self.client.get(f"{self.base}memories/", {"user_id": "alice"}).content.decode()
        assert "Erase this user…" in page
        confirm = self.client.get(confirm_url)
        assert confirm.status_code == 200
        assert b"Their 2 memories are hidden" in confirm.content
        with project_context(self.project.pk):
            assert not ErasureRequest.objects.exists()  # a GET changes nothing
        done = self.client.post(f"{self.base}users/erase/", {"user_id": "alice"}, follow=True)
        assert b"The user&#x27;s 2 memories are hidden" in done.content
        with project_context(self.project.pk):
            (asked,) = ErasureRequest.objects.all()
            states = dict(Memory.objects.values_list("text", "state"))
        assert (asked.subject_id, asked.actor) == ("alice", "user:owen")
        assert states == {
            "I drink green tea": "deleted",
            "I live in Oslo": "deleted",
            "I keep bees": "active",
        }
        listed = self.client.get(f"{self.base}erasures/").content.decode()
        assert "alice" in listed and "user:owen" in listed and "PENDING" in listed
        # Readers see the list, and change nothing.
        self.client.force_login(self.reader)
        assert self.client.get(f"{self.base}erasures/").status_code == 200
        refused = self.client.post(f"{self.base}users/erase/", {"user_id": "bob"})
        assert refused.status_code == 403
        assert self.memory(self.bob).state == Memory.State.ACTIVE


class ProjectsPageTestCase(TestCase):
    """Issue #50: the Projects page had no search and no count."""

    def test_it_counts_and_finds_projects(self) -> None:
        for org, name in (("acme", "main"), ("acme", "staging"), ("globex", "support")):
            make_key(org, name)
        root = User.objects.create_superuser("root", email="root@example.com", password="pw")
        self.client.force_login(root)
        page = self.client.get("/dashboard/").content.decode()
        assert "3 projects." in page and 'name="find"' in page
        found = self.client.get("/dashboard/", {"find": "GLOB"})
        assert [p.name for p in found.context["projects"]] == ["support"]
        assert "1 of 3 projects match" in found.content.decode()
        by_name = self.client.get("/dashboard/", {"find": "stag"}).context["projects"]
        assert [p.name for p in by_name] == ["staging"]
        none = self.client.get("/dashboard/", {"find": "nothing here"})
        assert "No project or organization name" in none.content.decode()
        assert self.client.get("/dashboard/", {"find": "a\x00"}).status_code == 400
