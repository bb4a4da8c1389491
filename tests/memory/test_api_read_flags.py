"""Mem0's read flags (latest_only, include_merged, keyword_search) and delete_linked.

engram's supersession chain is the data: an extraction UPDATE keeps the old memory, state
`superseded`, its `replaced_by` pointing to the new one (actions.do_supersede_memory). Reads
show active memories only unless `latest_only` is false; a delete with `delete_linked=true`
also deletes, transitively, the memories the named one superseded.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import pytest

from memory import actions
from memory.actions import Actor, ImmutableMemoryError, NewMemory
from memory.models import Memory, MemoryHistory
from memory.text.embeddings import embed
from tenants.db import project_context
from tenants.models import Project
from tests.base import BaseTestCase
from tests.factory import add_texts

ALICE = {"user_id": "alice"}
CITIES = ["I live in Paris", "I moved to Lyon", "I moved to Nice"]
QUERY = "where do I live?"
SEARCHES = ("/v3/memories/search/", "/v2/memories/search/", "/v1/memories/search/")
LISTS = ("/v3/memories/", "/v2/memories/")


def supersede_chain(project_id: uuid.UUID, texts: list[str], **extra: Any) -> list[Memory]:
    """The first text stored, then each next one superseding the previous (as extraction's
    UPDATE does); returns them oldest first. `extra` goes to the newest one (e.g. immutable)."""
    with project_context(project_id):
        (first,) = add_texts(Project.objects.get(pk=project_id), texts[:1], **ALICE)
        chain = [first]
        for position, (text, vector) in enumerate(zip(texts[1:], embed(texts[1:]), strict=True)):
            newest = position == len(texts) - 2
            new = NewMemory(text, vector, first.scope, {}, [], **(extra if newest else {}))
            chain.append(actions.do_supersede_memory(chain[-1], new, actor=Actor.command("test")))
    return chain


class ReadFlagsTestCase(BaseTestCase):
    paris: ClassVar[Memory]
    lyon: ClassVar[Memory]
    nice: ClassVar[Memory]
    cat: ClassVar[Memory]
    charlies: ClassVar[list[Memory]]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        alice = cls.alice.key.project
        cls.paris, cls.lyon, cls.nice = supersede_chain(alice.pk, CITIES)
        with project_context(alice.pk):
            (cls.cat,) = add_texts(alice, ["I have a cat called Tom"], **ALICE)
        # Another project's chain, with the same scope ids: never touched from Alice's key.
        cls.charlies = supersede_chain(cls.charlie.key.project_id, CITIES)

    # -- helpers ---------------------------------------------------------------------------

    def items(self, response: Any) -> list[dict[str, Any]]:
        assert response.status_code == 200, response.content
        body = response.json()
        found: list[dict[str, Any]] = body["results"] if isinstance(body, dict) else body
        return found

    def search(self, path: str, **flags: Any) -> list[dict[str, Any]]:
        body = {"query": QUERY, "filters": ALICE, "threshold": 0, **flags}
        return self.items(self.call("post", path, body))

    def listed(self, path: str, **flags: Any) -> list[dict[str, Any]]:
        return self.items(self.call("post", path, {"filters": ALICE, **flags}))

    def listed_v1(self, query: str = "") -> list[dict[str, Any]]:
        return self.items(self.call("get", f"/v1/memories/?user_id=alice{query}"))

    def every_read(self, **flags: Any) -> dict[str, list[dict[str, Any]]]:
        """Each search and list endpoint's items with these flags (GET /v1 as a query)."""
        reads = {path: self.search(path, **flags) for path in SEARCHES}
        reads |= {path: self.listed(path, **flags) for path in LISTS}
        query = "".join(f"&{k}={str(v).lower()}" for k, v in flags.items())
        reads["GET /v1/memories/"] = self.listed_v1(query)
        return reads

    def states(self) -> dict[str, str]:
        with project_context(self.alice.key.project_id):
            return dict(Memory.objects.values_list("text", "state"))

    def deletions(self, project_id: uuid.UUID | None = None) -> list[tuple[uuid.UUID, str]]:
        with project_context(project_id or self.alice.key.project_id):
            rows = MemoryHistory.objects.filter(event=MemoryHistory.Event.DELETE)
            return list(rows.order_by("memory_id").values_list("memory_id", "actor"))

    # -- latest_only -----------------------------------------------------------------------

    def test_reads_show_active_memories_only_by_default_and_with_latest_only(self) -> None:
        for flags in ({}, {"latest_only": True}):
            for where, items in self.every_read(**flags).items():
                texts = {item["memory"] for item in items}
                assert texts == {"I moved to Nice", "I have a cat called Tom"}, (where, flags)
                assert {item["lifecycle_state"] for item in items} == {"active"}

    def test_latest_only_false_adds_the_superseded_versions_everywhere(self) -> None:
        paris, lyon, nice = (str(m.id) for m in (self.paris, self.lyon, self.nice))
        for where, items in self.every_read(latest_only=False).items():
            by_text = {item["memory"]: item for item in items}
            assert set(by_text) == {*CITIES, "I have a cat called Tom"}, where
            lineage = [
                (by_text[t]["lifecycle_state"], by_text[t]["replaced_by"], by_text[t]["id"])
                for t in CITIES
            ]
            assert lineage == [
                ("superseded", lyon, paris),
                ("superseded", nice, lyon),
                ("active", None, nice),
            ], where
            assert by_text["I moved to Nice"]["linked_memory_ids"] == [lyon, paris], where
            assert by_text["I moved to Lyon"]["linked_memory_ids"] == [paris], where
            assert by_text["I live in Paris"]["linked_memory_ids"] == [], where

    def test_deleted_memories_stay_hidden_whatever_the_flag(self) -> None:
        with project_context(self.alice.key.project_id):
            actions.do_delete_memory(self.lyon, actor=Actor.command("test"))
        for where, items in self.every_read(latest_only=False).items():
            texts = {item["memory"] for item in items}
            assert "I moved to Lyon" not in texts, where
            assert "I live in Paris" in texts, where  # the chain walks through a deleted link
            nice = next(i for i in items if i["memory"] == "I moved to Nice")
            assert nice["linked_memory_ids"] == [str(self.paris.id)], where

    def test_one_memory_carries_its_lifecycle_fields(self) -> None:
        body = self.call("get", f"/v1/memories/{self.lyon.id}/").json()
        assert (body["lifecycle_state"], body["replaced_by"]) == ("superseded", str(self.nice.id))
        assert body["linked_memory_ids"] == [str(self.paris.id)]
        body = self.call("get", f"/v1/memories/{self.nice.id}/").json()
        assert (body["lifecycle_state"], body["replaced_by"]) == ("active", None)
        assert body["linked_memory_ids"] == [str(self.lyon.id), str(self.paris.id)]
        assert body["synthesized"] is False

    # -- include_merged, keyword_search ----------------------------------------------------

    def test_include_merged_and_keyword_search_are_accepted_and_change_nothing(self) -> None:
        for path in SEARCHES:
            plain = [(i["id"], i["score"]) for i in self.search(path)]
            for flags in (
                {"include_merged": True},
                {"include_merged": False},
                {"keyword_search": True},
                {"keyword_search": False},
            ):
                assert [(i["id"], i["score"]) for i in self.search(path, **flags)] == plain
        for path in LISTS:
            plain = [i["id"] for i in self.listed(path)]
            assert [i["id"] for i in self.listed(path, include_merged=True)] == plain
        assert [i["id"] for i in self.listed_v1("&include_merged=true")] == [
            i["id"] for i in self.listed_v1()
        ]

    def test_bad_flag_values_are_a_400_naming_the_flag(self) -> None:
        bad: list[tuple[str, str, Any]] = [
            (path, flag, value)
            for path in (*SEARCHES, *LISTS)
            for flag in ("latest_only", "include_merged")
            for value in ("maybe", [True], {"x": 1}, 2)
        ]
        bad += [(path, "keyword_search", "sometimes") for path in SEARCHES]
        for path, flag, value in bad:
            body = {"query": QUERY, "filters": ALICE, flag: value}
            response = self.call("post", path, body)
            assert response.status_code == 400, (path, flag, value)
            assert flag in response.json()["detail"], response.json()
        for query in ("latest_only=maybe", "include_merged=2", "latest_only="):
            response = self.call("get", f"/v1/memories/?user_id=alice&{query}")
            assert response.status_code == 400, query
            assert query.split("=")[0] in response.json()["detail"]

    # -- delete_linked ---------------------------------------------------------------------

    def test_delete_linked_deletes_the_chain_with_a_history_row_each(self) -> None:
        response = self.call("delete", f"/v1/memories/{self.nice.id}/?delete_linked=true")
        assert response.status_code == 200
        assert response.json() == {"message": "Memory deleted successfully!", "cascade_count": 2}
        states = self.states()
        assert [states[t] for t in CITIES] == ["deleted", "deleted", "deleted"]
        assert states["I have a cat called Tom"] == "active"
        actor = f"api:{self.alice.key.prefix}"
        assert self.deletions() == sorted((m.id, actor) for m in (self.paris, self.lyon, self.nice))
        for memory in (self.paris, self.lyon, self.nice):
            assert self.call("get", f"/v1/memories/{memory.id}/").status_code == 404
        for where, items in self.every_read(latest_only=False).items():
            assert [item["memory"] for item in items] == ["I have a cat called Tom"], where
        # Charlie's chain, with the same scope ids and texts, is untouched.
        with project_context(self.charlie.key.project_id):
            kept = Memory.objects.filter(pk__in=[m.id for m in self.charlies])
            assert sorted(kept.values_list("state", flat=True)) == [
                "active", "superseded", "superseded"
            ]  # fmt: skip
        assert self.deletions(self.charlie.key.project_id) == []

    def test_delete_linked_from_the_middle_keeps_the_newer_versions(self) -> None:
        response = self.call("delete", f"/v1/memories/{self.lyon.id}/?delete_linked=1")
        assert response.json()["cascade_count"] == 1
        states = self.states()
        assert [states[t] for t in CITIES] == ["deleted", "deleted", "active"]
        nice = self.call("get", f"/v1/memories/{self.nice.id}/").json()
        assert nice["linked_memory_ids"] == []

    def test_without_the_flag_only_the_named_memory_goes(self) -> None:
        for query in ("", "?delete_linked=false"):
            cat = self.cat if query else self.nice
            response = self.call("delete", f"/v1/memories/{cat.id}/{query}")
            assert response.json() == {"message": "Memory deleted successfully!"}, query
        states = self.states()
        # As Mem0's client warns: the superseded versions can resurface (latest_only=false).
        assert [states[t] for t in CITIES] == ["superseded", "superseded", "deleted"]
        texts = {i["memory"] for i in self.listed("/v3/memories/", latest_only=False)}
        assert texts == {"I live in Paris", "I moved to Lyon"}

    def test_a_bad_delete_linked_is_a_400_that_deletes_nothing(self) -> None:
        for value in ("maybe", "", "2", "yes%00"):
            response = self.call("delete", f"/v1/memories/{self.nice.id}/?delete_linked={value}")
            assert response.status_code == 400, value
            assert "detail" in response.json()
        assert set(self.states().values()) == {"active", "superseded"}
        assert self.deletions() == []

    def test_another_projects_key_cannot_delete_the_chain(self) -> None:
        path = f"/v1/memories/{self.nice.id}/?delete_linked=true"
        assert self.call("delete", path, who=self.charlie).status_code == 404
        assert set(self.states().values()) == {"active", "superseded"}
        assert self.deletions() == []

    def test_an_immutable_memory_in_the_chain_refuses_the_whole_delete(self) -> None:
        # Supersession refuses immutable memories, so an immutable predecessor comes only from
        # data changed outside the actions (an import, an operator): simulated here.
        with project_context(self.alice.key.project_id):
            Memory.objects.filter(pk=self.paris.pk).update(immutable=True)
        response = self.call("delete", f"/v1/memories/{self.nice.id}/?delete_linked=true")
        assert response.status_code == 400
        assert str(self.paris.id) in response.json()["detail"]
        assert [self.states()[t] for t in CITIES] == ["superseded", "superseded", "active"]
        assert self.deletions() == []
        # Named, it is deleted like any immutable memory on a key's explicit request.
        assert self.call("delete", f"/v1/memories/{self.paris.id}/").status_code == 200
        response = self.call("delete", f"/v1/memories/{self.nice.id}/?delete_linked=true")
        assert response.json()["cascade_count"] == 1
        assert [self.states()[t] for t in CITIES] == ["deleted", "deleted", "deleted"]

    def test_an_immutable_head_is_deleted_with_its_chain_only_on_a_keys_request(self) -> None:
        texts = ["I work at Acme", "I work at Globex"]
        old, fixed = supersede_chain(self.alice.key.project_id, texts, immutable=True)
        # The model may never delete it.
        with project_context(self.alice.key.project_id), pytest.raises(ImmutableMemoryError):
            actions.do_delete_memory(fixed, actor=Actor.extraction(uuid.uuid4()), linked=[old])
        assert [self.states()[t] for t in texts] == ["superseded", "active"]
        response = self.call("delete", f"/v1/memories/{fixed.id}/?delete_linked=true")
        assert response.json()["cascade_count"] == 1
        assert [self.states()[t] for t in texts] == ["deleted", "deleted"]
