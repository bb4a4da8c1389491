"""Ids in paths (#27): every scope id the API stores is addressable where a path takes one.

The official clients percent-encode the id as one path segment (Python `quote(id, safe="")`,
JavaScript `encodeURIComponent`), "/" as %2F. The server decodes the path before Django sees
it (WSGI PATH_INFO; the test client does the same), so the routes take the id with the
`scope` converter (memory/api/converters.py), which matches any text, "/" included.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote, unquote

from django.urls import resolve, reverse

from memory import actions
from memory.models import Memory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import auth, make_memory

AWKWARD = [
    "team/alpha",
    "/leading",
    "trailing/",
    "a//b",
    "100%",
    "%2F",  # literally: percent, two, F; not a "/"
    "with space",
    "ü 日本 🙂",
    "why?#not",
    "tab\tand\nnewline",
    "a/../b",
    "./a",
    "x/dashboard-link",  # a route's own fixed segment inside an id
    "dashboard-link",
    "s/" * 127 + "s",  # 255 characters: the longest id there is
]
# Whole dot segments. URL libraries remove "." and ".." segments before sending (httpx does,
# and so does the WHATWG URL of fetch, even for %2E), so an add refuses them: no official
# client could erase such a user. One stored before that rule is still reached by a client
# that sends the dots encoded (%2E), as curl does.
DOTS = [".", ".."]


def segment(value: str) -> str:
    """`value` as a path segment: as the official clients quote it, dots encoded if all dots."""
    encoded = quote(value, safe="")
    return encoded.replace(".", "%2E") if set(value) == {"."} else encoded


class PathIdTestCase(BaseTestCase):
    def add(self, text: str, who: Any = None, **scope: str) -> None:
        response = self.call(
            "post", "/v3/memories/add/", {"messages": text, **scope, "infer": False}, who
        )
        assert response.status_code == 200, response.content
        assert [r["event"] for r in response.json()["results"]] == ["ADD"]

    def listed(self, who: Any = None) -> set[tuple[str, str]]:
        page = self.call("get", "/v1/entities/?page_size=1000", who=who).json()["results"]
        return {(e["type"], e["name"]) for e in page}

    def stored(self, **scope: str) -> list[tuple[str, str | None]]:
        with project_context(self.alice.key.project_id):
            rows = Memory.objects.filter(**scope)
            return sorted(rows.values_list("text", "state"))

    def link_page(self, user_id: str, who: Any = None) -> Any:
        response = self.call("post", f"/v1/users/{segment(user_id)}/dashboard-link/", who=who)
        assert response.status_code == 200, (user_id, response.content)
        page = self.client.get(response.json()["url"])
        assert page.status_code == 200, user_id
        return page

    def test_a_user_with_any_stored_id_gets_a_link_is_listed_and_is_erased(self) -> None:
        for n, user_id in enumerate(AWKWARD):
            with self.subTest(user_id=user_id):
                text = f"Fact number {n} of this user"
                self.add(text, user_id=user_id)
                assert ("user", user_id) in self.listed()
                assert self.stored(user_id=user_id) == [(text, "active")]

                page = self.link_page(user_id)
                assert [m.text for m in page.context["page"].object_list] == [text]

                response = self.call("delete", f"/v2/entities/user/{segment(user_id)}/")
                assert response.status_code == 202, response.content
                assert "1 memories hidden" in response.json()["message"]
                assert text not in self.active_texts()
                assert ("user", user_id) not in self.listed()
                erasure = uuid.UUID(response.json()["event_id"])
                assert actions.do_run_erasure(self.alice.key.project_id, erasure) is True
                assert self.stored(user_id=user_id) == []
                status = self.call("get", f"/v1/erasures/{erasure}/").json()["status"]
                assert status == "SUCCEEDED"

    def test_agents_apps_and_runs_with_any_stored_id_are_deleted_through_both_paths(
        self,
    ) -> None:
        for kind in ("agent", "app", "run"):
            for n, name in enumerate(AWKWARD):
                with self.subTest(kind=kind, name=name):
                    text = f"Fact number {n} of this {kind}"
                    self.add(text, **{f"{kind}_id": name})
                    assert (kind, name) in self.listed()
                    version = "v1" if n % 2 else "v2"
                    response = self.call("delete", f"/{version}/entities/{kind}/{segment(name)}/")
                    assert response.status_code == 200, response.content
                    assert response.json()["message"].endswith("; 1 memories deleted.")
                    assert self.stored(**{f"{kind}_id": name}) == [(text, "deleted")]
                    assert (kind, name) not in self.listed()

    def test_an_id_of_dots_only_is_refused_at_add_and_stores_nothing(self) -> None:
        for field in ("user_id", "agent_id", "app_id", "run_id"):
            for value in [*DOTS, " .. "]:
                for body in ({field: value}, {"filters": {field: value}}):
                    with self.subTest(body=body):
                        response = self.call(
                            "post", "/v3/memories/add/", {"messages": "A fact", **body}
                        )
                        assert response.status_code == 400, response.content
                        detail = response.json()["detail"]
                        assert field in detail, detail
                        assert "could not be erased through the API" in detail, detail
        assert self.active_texts() == set()
        assert self.listed() == set()
        # Dots among other characters are an id like any other.
        for value in ("...", "a.", ".a", "./a"):
            self.add(f"Fact of {value}", user_id=value)
            assert ("user", value) in self.listed()

    def test_a_dot_only_id_stored_before_the_rule_is_still_erased_through_the_path(
        self,
    ) -> None:
        with project_context(self.alice.key.project_id):
            for n, value in enumerate(DOTS):
                make_memory(self.alice.key.project_id, f"Legacy fact {n}", user_id=value)
                make_memory(self.alice.key.project_id, f"Legacy agent fact {n}", agent_id=value)
        for n, value in enumerate(DOTS):
            response = self.call("delete", f"/v2/entities/user/{segment(value)}/")
            assert response.status_code == 202, response.content
            assert "1 memories hidden" in response.json()["message"]
            erasure = uuid.UUID(response.json()["event_id"])
            assert actions.do_run_erasure(self.alice.key.project_id, erasure) is True
            assert self.stored(user_id=value) == []
            response = self.call("delete", f"/v1/entities/agent/{segment(value)}/")
            assert response.json()["message"].endswith("; 1 memories deleted.")
            assert self.stored(agent_id=value) == [(f"Legacy agent fact {n}", "deleted")]
        assert self.active_texts() == set()

    def test_a_slash_sent_unencoded_reaches_the_same_id(self) -> None:
        self.add("Alpha team fact", user_id="team/alpha")
        response = self.call("post", "/v1/users/team/alpha/dashboard-link/")
        assert response.status_code == 200
        response = self.call("delete", "/v1/entities/user/team/alpha/")
        assert response.status_code == 202
        assert "1 memories hidden" in response.json()["message"]

    def test_another_project_reaches_none_of_it(self) -> None:
        self.add("Alpha team fact of acme", user_id="team/alpha")
        self.add("Beta agent fact of acme", agent_id="beta/agent")
        assert self.listed(who=self.charlie) == set()
        page = self.link_page("team/alpha", who=self.charlie)  # charlie's own user of that id
        assert list(page.context["page"].object_list) == []
        assert b"acme" not in page.content

        response = self.call("delete", "/v2/entities/user/team%2Falpha/", who=self.charlie)
        assert response.status_code == 202
        assert "0 memories hidden" in response.json()["message"]
        response = self.call("delete", "/v2/entities/agent/beta%2Fagent/", who=self.charlie)
        assert response.json()["message"].endswith("; 0 memories deleted.")
        assert self.active_texts() == {"Alpha team fact of acme", "Beta agent fact of acme"}

        erasure = self.call("delete", "/v2/entities/user/team%2Falpha/").json()["event_id"]
        response = self.call("get", f"/v1/erasures/{erasure}/", who=self.charlie)
        assert response.status_code == 404  # another project's erasure, as if none existed
        assert self.call("get", f"/v1/erasures/{erasure}/").status_code == 200

    def test_an_id_no_memory_can_have_is_a_400_with_a_detail(self) -> None:
        overlong = segment("t/" * 128)  # 256 characters
        for method, path, field in [
            ("post", f"/v1/users/{overlong}/dashboard-link/", "user_id"),
            ("delete", f"/v2/entities/user/{overlong}/", "user id"),
            ("delete", f"/v1/entities/run/{overlong}/", "run id"),
            ("post", "/v1/users/a%00%2Fb/dashboard-link/", "path"),
            ("delete", "/v2/entities/agent/a%00%2Fb/", "path"),
            ("delete", "/v2/entities/team/a%2Fb/", "Unknown entity type"),
        ]:
            response = getattr(self.client, method)(path, headers=auth(self.alice.raw))
            assert response.status_code == 400, (path, response.status_code)
            detail = response.json()["detail"]
            assert field in str(detail), (path, detail)

    def test_the_routes_resolve_one_way(self) -> None:
        match = resolve("/v1/users/x/dashboard-link/dashboard-link/")
        assert (match.url_name, match.kwargs) == ("dashboard-link", {"user_id": "x/dashboard-link"})
        match = resolve("/v2/entities/user/a/b/")
        assert (match.url_name, match.kwargs) == ("entity", {"entity_type": "user", "name": "a/b"})
        assert resolve("/v1/entities/run/trailing//").kwargs["name"] == "trailing/"
        for user_id in AWKWARD:  # reverse() quotes the id; the server decodes it
            url = reverse("dashboard-link", kwargs={"user_id": user_id})
            assert resolve(unquote(url)).kwargs == {"user_id": user_id}, url

    def test_the_schema_says_how_to_send_an_id(self) -> None:
        schema = self.client.get("/api/schema/", headers={"Accept": "application/json"}).json()
        for path, method, name in [
            ("/v1/users/{user_id}/dashboard-link/", "post", "user_id"),
            ("/v2/entities/{entity_type}/{name}/", "delete", "name"),
            ("/v1/entities/{entity_type}/{name}/", "delete", "name"),
        ]:
            [parameter] = [
                p for p in schema["paths"][path][method]["parameters"] if p["name"] == name
            ]
            assert parameter["schema"] == {"type": "string"}
            assert "team%2Falpha" in parameter["description"]
