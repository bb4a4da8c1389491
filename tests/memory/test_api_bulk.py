from __future__ import annotations

from memory.models import Memory, MemoryHistory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import make_memory


class BulkTestCase(BaseTestCase):
    def setUp(self) -> None:
        pid = self.alice.key.project_id
        with project_context(pid):
            self.a1 = make_memory(pid, "alice one")
            self.a2 = make_memory(pid, "alice two")
            self.bob = make_memory(pid, "bob one", user_id="bob")
            self.shared = make_memory(pid, "alice with bot", agent_id="bot")

    def test_it_deletes_all_of_a_user(self) -> None:
        response = self.call("delete", "/v1/memories/?user_id=alice")
        assert response.json()["deleted"] == 3
        assert self.active_texts() == {"bob one"}

    def test_it_accepts_the_python_repr_filters_quirk(self) -> None:
        self.call("delete", "/v1/memories/?filters={'user_id': 'alice', 'agent_id': 'bot'}")
        assert self.active_texts() == {"alice one", "alice two", "bob one"}

    def test_it_deletes_with_a_wildcard(self) -> None:
        self.call("delete", "/v1/memories/?agent_id=*")
        assert self.active_texts() == {"alice one", "alice two", "bob one"}

    def test_it_refuses_a_delete_without_scope(self) -> None:
        response = self.call("delete", "/v1/memories/")
        assert response.status_code == 400
        assert "user_id" in response.json()["detail"]
        assert len(self.active_texts()) == 4

    def test_it_refuses_malformed_filters_in_the_query(self) -> None:
        assert self.call("delete", "/v1/memories/?filters=[1,2]").status_code == 400
        assert self.call("delete", "/v1/memories/?filters={'colour': 'red'}").status_code == 400
        assert len(self.active_texts()) == 4

    def test_it_updates_a_batch(self) -> None:
        body = {"memories": [{"memory_id": str(self.a1.id), "text": "alice uno"},
                             {"memory_id": str(self.a2.id), "metadata": {"x": 1}}]}  # fmt: skip
        response = self.call("put", "/v1/batch/", body)
        assert response.json() == {"message": "Successfully updated 2 memories"}
        assert "alice uno" in self.active_texts()
        with project_context(self.alice.key.project_id):
            assert Memory.objects.get(pk=self.a2.pk).metadata == {"x": 1}
            assert MemoryHistory.objects.filter(event="UPDATE").count() == 2

    def test_it_deletes_a_batch(self) -> None:
        body = {"memories": [{"memory_id": str(self.a1.id)}, {"memory_id": str(self.bob.id)}]}
        assert (
            self.call("delete", "/v1/batch/", body).json()["message"]
            == "Successfully deleted 2 memories"
        )
        assert self.active_texts() == {"alice two", "alice with bot"}

    def test_it_applies_nothing_when_one_item_is_bad(self) -> None:
        missing = "00000000-0000-0000-0000-000000000000"
        body = {
            "memories": [{"memory_id": str(self.a1.id), "text": "changed"}, {"memory_id": missing}]
        }
        response = self.call("put", "/v1/batch/", body)
        assert response.status_code == 400
        assert missing in response.json()["detail"]
        assert "alice one" in self.active_texts()

    def test_it_refuses_more_than_1000_items(self) -> None:
        body = {"memories": [{"memory_id": str(self.a1.id)}] * 1001}
        response = self.call("delete", "/v1/batch/", body)
        assert response.status_code == 400
        assert len(self.active_texts()) == 4

    def test_it_refuses_duplicate_and_malformed_ids(self) -> None:
        twice = {"memories": [{"memory_id": str(self.a1.id)}] * 2}
        assert self.call("delete", "/v1/batch/", twice).status_code == 400
        assert (
            self.call("delete", "/v1/batch/", {"memories": [{"memory_id": "x"}]}).status_code == 400
        )
        assert self.call("delete", "/v1/batch/", {"memories": []}).status_code == 400
        assert len(self.active_texts()) == 4
