"""Whitespace around a scope id: an add trims it (" x " is stored as the user "x",
ScopeIdField), so every place that takes an id cleans it the same way (the paths, the query
strings, `filters`, the MCP tools). An application that sends the same padded id to add and
then to erase erases its user; an id that is nothing but whitespace is a 400 that changes
nothing, never an erasure of "" or of everything.
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote, urlparse

import pytest
from django.urls import resolve

from audit.models import ErasureRequest
from memory import actions
from memory.models import Memory
from tenants import links
from tenants.actions import NewApiKey
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import make_key
from tests.memory.test_mcp import active_texts, call, session, text

X_TEXTS = {"Padded fact of x", "Plain fact of x"}
OTHERS = {"Fact of y", "Fact of the bot"}
# Ways to write the filter {"user_id": "x"} with whitespace around the id.
PADDED_FILTERS: list[dict[str, Any]] = [
    {"user_id": " x "},
    {"user_id": "\tx\n"},
    {"user_id": {"eq": " x "}},
    {"user_id": {"in": [" x ", "nobody"]}},
    {"AND": [{"user_id": " x "}]},
    {"OR": [{"user_id": " x "}, {"user_id": "nobody"}]},
    {"NOT": {"user_id": {"ne": " x "}}, "user_id": "*"},
]


def results(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.content
    body = response.json()
    found: list[dict[str, Any]] = body["results"] if isinstance(body, dict) else body
    return found


class IdWhitespaceTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.add("Padded fact of x", user_id=" x ")
        self.add("Plain fact of x", user_id="x")
        self.add("Fact of y", user_id="y")
        self.add("Fact of the bot", agent_id=" bot\t")

    def add(self, text: str, **body: Any) -> None:
        response = self.call(
            "post", "/v3/memories/add/", {"messages": text, "infer": False, **body}
        )
        assert response.status_code == 200, response.content
        assert [r["event"] for r in response.json()["results"]] == ["ADD"]

    def stored(self, **scope: str) -> set[tuple[str, str]]:
        with project_context(self.alice.key.project_id):
            return set(Memory.objects.filter(**scope).values_list("text", "state"))

    def erasures(self) -> list[tuple[str, str]]:
        with project_context(self.alice.key.project_id):
            return list(ErasureRequest.objects.values_list("subject_kind", "subject_id"))

    def entities(self) -> set[tuple[str, str]]:
        page = self.call("get", "/v1/entities/").json()["results"]
        return {(e["type"], e["name"]) for e in page}

    def test_an_add_stores_the_trimmed_id_top_level_or_in_filters(self) -> None:
        self.add("Fact of x through filters", filters={"user_id": "  x "})
        assert self.stored(user_id="x") == {
            ("Padded fact of x", "active"),
            ("Plain fact of x", "active"),
            ("Fact of x through filters", "active"),
        }
        assert self.stored(user_id=" x ") == set()
        assert self.stored(agent_id="bot") == {("Fact of the bot", "active")}
        assert self.entities() == {("user", "x"), ("user", "y"), ("agent", "bot")}

    def test_a_padded_user_in_the_path_is_the_user_erased(self) -> None:
        for version, padded in [("v2", " x "), ("v1", "\tx\n")]:
            with self.subTest(version=version):
                if version == "v1":
                    self.add("Fact of x again", user_id="x")
                path = f"/{version}/entities/user/{quote(padded, safe='')}/"
                response = self.call("delete", path)
                assert response.status_code == 202, response.content
                hidden = 2 if version == "v2" else 1
                assert f"{hidden} memories hidden" in response.json()["message"]
                assert self.active_texts() == OTHERS
                erasure = uuid.UUID(response.json()["event_id"])
                with project_context(self.alice.key.project_id):
                    request = ErasureRequest.objects.get(pk=erasure)
                assert (request.subject_kind, request.subject_id) == ("user", "x")
                assert actions.do_run_erasure(self.alice.key.project_id, erasure) is True
                assert self.stored(user_id="x") == set()
                assert self.stored(user_id="y") == {("Fact of y", "active")}
                assert ("user", "x") not in self.entities()

    def test_a_padded_agent_in_the_path_is_the_agent_deleted(self) -> None:
        response = self.call("delete", "/v1/entities/agent/%20bot%20/")
        assert response.status_code == 200, response.content
        assert response.json()["message"].endswith("; 1 memories deleted.")
        assert self.stored(agent_id="bot") == {("Fact of the bot", "deleted")}
        assert self.active_texts() == X_TEXTS | {"Fact of y"}

    def test_the_dashboard_link_of_a_padded_user_is_the_users(self) -> None:
        response = self.call("post", "/v1/users/%20x%20/dashboard-link/")
        assert response.status_code == 200, response.content
        url = response.json()["url"]
        token = resolve(urlparse(url).path).kwargs["token"]
        assert links.resolve(token).user_id == "x"
        page = self.client.get(url)
        assert page.status_code == 200
        assert {m.text for m in page.context["page"].object_list} == X_TEXTS

    def test_a_padded_id_in_the_query_string_deletes_that_scope(self) -> None:
        response = self.call("delete", "/v1/memories/?user_id=%20x%20")
        assert response.status_code == 200, response.content
        assert response.json()["deleted"] == 2
        assert self.active_texts() == OTHERS
        filters = quote(json.dumps({"user_id": " y\t"}))
        response = self.call("delete", f"/v1/memories/?filters={filters}")
        assert response.json()["deleted"] == 1
        assert self.active_texts() == {"Fact of the bot"}
        response = self.call("delete", "/v1/memories/?agent_id=%20bot")
        assert response.json()["deleted"] == 1
        assert self.active_texts() == set()

    def test_padded_ids_in_filters_find_the_ids_memories(self) -> None:
        for filters in PADDED_FILTERS:
            for method, path, body in [
                ("post", "/v3/memories/search/", {"query": "fact", "threshold": 0}),
                ("post", "/v2/memories/search/", {"query": "fact", "threshold": 0}),
                ("post", "/v3/memories/", {}),
                ("post", "/v2/memories/", {}),
                ("get", f"/v1/memories/?filters={quote(json.dumps(filters))}", None),
            ]:
                with self.subTest(path=path, filters=filters):
                    payload = None if body is None else {**body, "filters": filters}
                    found = results(self.call(method, path, payload))
                    assert {m["memory"] for m in found} == X_TEXTS
                    assert {m["user_id"] for m in found} == {"x"}
        found = results(self.call("get", "/v1/memories/?user_id=%20x%20"))
        assert {m["memory"] for m in found} == X_TEXTS

    def test_an_export_made_with_padded_filters_is_found_with_them(self) -> None:
        filters = {"user_id": " x "}
        created = self.call("post", "/v1/exports/", {"filters": filters})
        assert created.status_code in (200, 201), created.content
        got = self.call("post", "/v1/exports/get/", {"filters": filters})
        assert got.status_code == 200, got.content
        assert got.json()["id"] == created.json()["id"]
        assert got.json()["filters"] == {"user_id": "x"}
        assert {m["memory"] for m in got.json()["results"]} == X_TEXTS

    def test_an_id_of_whitespace_only_is_a_400_that_changes_nothing(self) -> None:
        blank_filters = quote(json.dumps({"user_id": " "}))
        for method, path, body in [
            ("post", "/v3/memories/add/", {"messages": "x", "user_id": "   ", "infer": False}),
            ("post", "/v3/memories/add/", {"messages": "x", "filters": {"user_id": "\t"}}),
            ("delete", "/v2/entities/user/%20/", None),
            ("delete", "/v1/entities/user/%20%09%0A/", None),
            ("delete", "/v2/entities/agent/%20%20/", None),
            ("post", "/v1/users/%20/dashboard-link/", None),
            ("delete", "/v1/memories/?user_id=%20", None),
            ("delete", "/v1/memories/?user_id=%20&agent_id=bot", None),  # not "just the bot"
            ("delete", "/v1/memories/?user_id=", None),
            ("delete", f"/v1/memories/?filters={blank_filters}", None),
            ("post", "/v3/memories/search/", {"query": "fact", "filters": {"user_id": " "}}),
            ("post", "/v3/memories/", {"filters": {"OR": [{"user_id": "\n"}]}}),
            ("post", "/v2/memories/", {"filters": {"user_id": {"in": ["x", " "]}}}),
            ("get", "/v1/memories/?user_id=%20", None),
            ("post", "/v1/exports/", {"filters": {"user_id": " "}}),
        ]:
            with self.subTest(method=method, path=path, body=body):
                response = self.call(method, path, body)
                assert response.status_code == 400, response.content
                detail = response.json()["detail"]
                assert "blank" in detail or "empty or only whitespace" in detail, detail
        assert self.active_texts() == X_TEXTS | OTHERS
        assert self.erasures() == []
        assert self.entities() == {("user", "x"), ("user", "y"), ("agent", "bot")}

    def test_a_wildcard_with_spaces_is_refused_rather_than_read_as_any_value(self) -> None:
        star = quote(json.dumps({"user_id": " * "}))
        for method, path, body in [
            ("delete", "/v1/memories/?user_id=%20*%20", None),
            ("delete", f"/v1/memories/?filters={star}", None),
            ("post", "/v3/memories/search/", {"query": "fact", "filters": {"user_id": "* "}}),
            ("post", "/v3/memories/", {"filters": {"user_id": {"eq": " *"}}}),
            ("post", "/v3/memories/add/", {"messages": "x", "user_id": " * ", "infer": False}),
        ]:
            with self.subTest(method=method, path=path, body=body):
                response = self.call(method, path, body)
                assert response.status_code == 400, response.content
                assert "'*'" in response.json()["detail"], response.json()
        assert self.active_texts() == X_TEXTS | OTHERS
        # Written exactly, "*" still means any value.
        response = self.call("delete", "/v1/memories/?user_id=*")
        assert response.json()["deleted"] == 3
        assert self.active_texts() == {"Fact of the bot"}


@pytest.fixture
def acme(live_api: str) -> NewApiKey:
    return make_key("acme", "mcp")


def test_the_mcp_tools_clean_ids_as_an_add_stores_them(live_api: str, acme: NewApiKey) -> None:
    added = call(live_api, acme, "add_memory", text="Padded fact of x", user_id=" x ", infer=False)
    assert added.structured_content["status"] == "SUCCEEDED", text(added)
    call(live_api, acme, "add_memory", text="Fact of y", user_id="y", infer=False)
    with project_context(acme.key.project_id):
        assert set(Memory.objects.values_list("user_id", flat=True)) == {"x", "y"}

    found = call(live_api, acme, "search_memories", query="fact", filters={"user_id": " x "})
    assert [r["memory"] for r in found.structured_content["results"]] == ["Padded fact of x"]
    page = call(live_api, acme, "get_memories", filters={"AND": [{"user_id": "x\t"}]})
    assert [r["memory"] for r in page.structured_content["results"]] == ["Padded fact of x"]

    # A connection fixed to "x" takes " x " as "x", in ids and in filters.
    pinned = "/mcp/?user_id=x"
    found = call(live_api, acme, "search_memories", path=pinned, query="fact",
                 filters={"user_id": " x "})  # fmt: skip
    assert not found.is_error, text(found)
    assert [r["memory"] for r in found.structured_content["results"]] == ["Padded fact of x"]
    added = call(live_api, acme, "add_memory", path=pinned, text="Second fact of x",
                 user_id=" x ", infer=False)  # fmt: skip
    assert not added.is_error, text(added)

    async def blanks(client: Any) -> list[Any]:
        return [
            await client.call_tool("delete_all_memories", {"user_id": "  "}),
            await client.call_tool("delete_entities", {"user_id": "\t"}),
            await client.call_tool("add_memory", {"text": "z", "user_id": " ", "infer": False}),
            await client.call_tool("search_memories", {"query": "f", "filters": {"user_id": " "}}),
        ]

    for result in session(live_api, acme, blanks):
        assert result.is_error and "empty or only whitespace" in text(result), text(result)
    assert active_texts(acme) == {"Padded fact of x", "Second fact of x", "Fact of y"}

    deleted = call(live_api, acme, "delete_entities", user_id=" x ")
    assert deleted.structured_content["deleted"] == {"user_id": 2}, text(deleted)
    deleted = call(live_api, acme, "delete_all_memories", user_id="y ")
    assert deleted.structured_content["deleted"] == 1, text(deleted)
    assert active_texts(acme) == set()
