"""Memory in the Django admin: per-project browsing under row-level security, corrections
through the actions (history with the staff member, re-embedding), roles."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from memory import actions
from memory.models import Memory, MemoryHistory
from tenants.db import project_context
from tenants.models import Membership
from tests.base import BaseTestCase
from tests.factory import add_texts

URL = "/admin/memory/memory/"


class MemoryAdminTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project
        with project_context(self.project.pk):
            self.tea, self.paris = add_texts(
                self.project, ["User likes green tea", "User lives in Paris"], user_id="alice"
            )
        with project_context(self.charlie.key.project_id):
            add_texts(self.charlie.key.project, ["Charlie's secret plan"], user_id="charlie")
        self.editor = self.member("ed", Membership.Role.ADMIN)

    def member(self, name: str, role: str, org: Any = None) -> User:
        user = get_user_model().objects.create_user(name, password="pw", is_staff=True)
        Membership.objects.create(
            user=user, organization=org or self.project.organization, role=role
        )
        return user

    def listing(self, user: User, **params: str) -> Any:
        self.client.force_login(user)
        return self.client.get(URL, params)

    def change_url(self, memory: Memory) -> str:
        return f"{URL}{memory.pk}/change/?_changelist_filters=project%3D{self.project.pk}"

    def memory(self, pk: Any) -> Memory:
        with project_context(self.project.pk):
            return Memory.objects.get(pk=pk)

    def test_a_project_must_be_chosen_and_only_its_memories_show(self) -> None:
        assert self.listing(self.editor).context["cl"].result_count == 0
        page = self.listing(self.editor, project=str(self.project.pk))
        texts = {m.text for m in page.context["cl"].result_list}
        assert texts == {"User likes green tea", "User lives in Paris"}
        assert b"Charlie&#x27;s secret plan" not in page.content

    def test_another_organizations_project_shows_nothing(self) -> None:
        page = self.listing(self.editor, project=str(self.charlie.key.project_id))
        assert page.context["cl"].result_count == 0
        outsider = self.member("out", Membership.Role.OWNER, self.charlie.key.project.organization)
        page = self.listing(outsider, project=str(self.project.pk))
        assert page.context["cl"].result_count == 0
        self.client.force_login(outsider)
        response = self.client.get(self.change_url(self.tea))
        assert response.status_code == 302  # "does not exist": no tenant, no row

    def test_an_edit_goes_through_the_update_action(self) -> None:
        self.client.force_login(self.editor)
        before = self.memory(self.tea.pk)
        response = self.client.post(
            self.change_url(self.tea),
            {"text": "User likes oolong tea", "metadata": '{"source": "operator"}',
             "expiration_date": ""},
        )  # fmt: skip
        assert response.status_code == 302, response.content[:500]
        after = self.memory(self.tea.pk)
        assert (after.text, after.metadata) == ("User likes oolong tea", {"source": "operator"})
        assert list(after.embedding) != list(before.embedding)  # re-embedded
        with project_context(self.project.pk):
            row = MemoryHistory.objects.filter(memory_id=self.tea.pk, event="UPDATE").get()
        assert (row.old_memory, row.new_memory, row.actor) == (
            "User likes green tea", "User likes oolong tea", "user:ed"
        )  # fmt: skip

    def test_metadata_must_be_an_object_without_scope_ids(self) -> None:
        self.client.force_login(self.editor)
        for metadata, problem in (('{"user_id": "bob"}', b"is a scope id"),
                                  ("[1, 2]", b"must be a JSON object")):  # fmt: skip
            response = self.client.post(
                self.change_url(self.tea),
                {"text": "User likes tea", "metadata": metadata, "expiration_date": ""},
            )
            assert response.status_code == 200 and problem in response.content, metadata
        assert (self.memory(self.tea.pk).text, self.memory(self.tea.pk).metadata) == (
            "User likes green tea", {}
        )  # fmt: skip

    def test_an_immutable_memory_cannot_be_edited(self) -> None:
        with project_context(self.project.pk):
            Memory.objects.filter(pk=self.tea.pk).update(immutable=True)
        self.client.force_login(self.editor)
        response = self.client.post(
            self.change_url(self.tea),
            {"text": "User likes coffee", "metadata": "{}", "expiration_date": ""},
        )
        assert response.status_code == 200
        assert b"immutable" in response.content
        assert self.memory(self.tea.pk).text == "User likes green tea"

    def test_delete_is_the_soft_delete_and_restore_brings_it_back(self) -> None:
        self.client.force_login(self.editor)
        delete = f"{URL}{self.paris.pk}/delete/?_changelist_filters=project%3D{self.project.pk}"
        assert self.client.post(delete, {"post": "yes"}).status_code == 302
        assert self.memory(self.paris.pk).state == "deleted"
        response = self.client.post(
            f"{URL}?project={self.project.pk}",
            {"action": "restore", "_selected_action": [str(self.paris.pk)]},
        )
        assert response.status_code == 302
        assert self.memory(self.paris.pk).state == "active"
        with project_context(self.project.pk):
            events = list(
                MemoryHistory.objects.filter(memory_id=self.paris.pk)
                .order_by("created_at")
                .values_list("event", "actor")
            )
        assert events[-2:] == [("DELETE", "user:ed"), ("RESTORE", "user:ed")]

    def test_a_reader_sees_but_cannot_change(self) -> None:
        reader = self.member("reader", Membership.Role.READER, self.alice.key.project.organization)
        page = self.listing(reader, project=str(self.project.pk))
        assert page.context["cl"].result_count == 2
        response = self.client.post(
            self.change_url(self.tea),
            {"text": "User likes coffee", "metadata": "{}", "expiration_date": ""},
        )
        assert response.status_code == 403
        delete = f"{URL}{self.tea.pk}/delete/?_changelist_filters=project%3D{self.project.pk}"
        assert self.client.post(delete, {"post": "yes"}).status_code == 403
        assert self.memory(self.tea.pk).text == "User likes green tea"

    def test_the_other_tenant_tables_are_listed_read_only(self) -> None:
        self.client.force_login(self.editor)
        for path in ("memoryhistory", "memoryevent", "memoryentity", "scopesummary",
                     "feedback", "memoryexport", "idempotentrequest"):  # fmt: skip
            response = self.client.get(f"/admin/memory/{path}/", {"project": str(self.project.pk)})
            assert response.status_code == 200, path
        actions.do_erase_user(self.project, "someone", actor=actions.Actor.command("test"))
        for path in ("purgerecord", "erasurerequest"):
            response = self.client.get(f"/admin/audit/{path}/", {"project": str(self.project.pk)})
            assert response.status_code == 200, path
            assert not response.context["cl"].model_admin.has_change_permission(
                response.wsgi_request
            )
        page = self.client.get("/admin/memory/memoryhistory/", {"project": str(self.project.pk)})
        assert page.context["cl"].result_count == 2  # the two ADDs
        row = page.context["cl"].result_list[0]
        detail = self.client.get(
            f"/admin/memory/memoryhistory/{row.pk}/change/"
            f"?_changelist_filters=project%3D{self.project.pk}"
        )
        assert detail.status_code == 200
        assert b'name="_save"' not in detail.content

    def test_staff_without_a_membership_see_no_memory_admin(self) -> None:
        nobody = get_user_model().objects.create_user("nobody", password="pw", is_staff=True)
        self.client.force_login(nobody)
        assert self.client.get(URL).status_code == 403
