"""The operator's erasures (issue #50: the operator could not erase a user, erase a memory for
good or see the erasure list): each after a confirmation, under the operator's name, owners
and admins only."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.test import TestCase
from django.utils import timezone

from audit.models import ErasureRequest
from memory.models import Memory, MemoryHistory
from tenants import links
from tenants.db import project_context
from tenants.models import ApiKey
from tests.factory import add_texts, make_key
from tests.memory.test_web_memories import TeamTestCase


class OperatorPowersBase(TeamTestCase):
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


class ErasuresTestCase(OperatorPowersBase):
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


class UserPageTestCase(OperatorPowersBase):
    """Issue #50 (part 3, item 6): the operator opens the user's own page, after a confirmation,
    and what they change there is recorded under their name, not the user's."""

    def test_the_operator_opens_the_users_page_and_acts_under_their_own_name(self) -> None:
        url = f"{self.base}users/page/?user_id=alice"
        self.client.force_login(self.reader)
        assert self.client.get(url).status_code == 403
        self.client.force_login(self.owner)
        listed = self.client.get(f"{self.base}memories/?user_id=alice").content.decode()
        assert f"{self.base}users/page/?user_id=alice" in listed
        confirm = self.client.get(url)
        assert confirm.status_code == 200 and b"recorded under your name" in confirm.content
        opened = self.client.post(f"{self.base}users/page/", {"user_id": "alice"})
        assert opened.status_code == 302 and opened["Location"].startswith("/me/")
        page = self.client.get(opened["Location"])
        content = page.content.decode()
        assert "Opened by support staff <bdi>owen</bdi>" in content
        assert "I drink green tea" in content and "I keep bees" not in content
        token = opened["Location"].split("/")[2]
        fixed = self.client.post(f"/me/{token}/m/{self.tea.pk}/correct/",
                                 {"text": "I drink black tea"})  # fmt: skip
        assert fixed.status_code == 302
        with project_context(self.project.pk):
            last = MemoryHistory.objects.filter(memory_id=self.tea.pk).latest("created_at")
        assert (last.event, last.actor) == ("UPDATE", "user:owen")  # not "enduser:alice"
        # The staff member undoes their own delete there; the user's own link may not.
        self.client.post(f"/me/{token}/m/{self.oslo.pk}/delete/")
        home = self.client.get(f"/me/{token}/").content.decode()
        assert "Undo the delete" in home
        mine, _ = links.mint(self.key, "alice", 3600)
        theirs = self.client.get(f"/me/{mine}/").content.decode()
        assert "support staff" in theirs and "Opened by" not in theirs
        # Revoking the key that signed it ends the link.
        with project_context(self.project.pk):
            ApiKey.objects.filter(pk=self.key.pk).update(revoked_at=timezone.now())
        assert self.client.get(f"/me/{token}/").status_code == 403

    def test_without_an_active_key_it_asks_for_one(self) -> None:
        with project_context(self.project.pk):
            ApiKey.objects.filter(project=self.project).update(revoked_at=timezone.now())
        self.client.force_login(self.owner)
        answer = self.client.post(f"{self.base}users/page/", {"user_id": "alice"})
        assert answer.status_code == 200 and b"create a key" in answer.content

    @property
    def key(self) -> ApiKey:
        found = ApiKey.objects.filter(project=self.project, revoked_at__isnull=True).first()
        assert found is not None
        return found
