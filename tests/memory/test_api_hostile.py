"""Hostile input, one regression test per defect found by a hostile client (issue #7).

Every refused request answers 4xx with a JSON `detail` and writes nothing.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar
from urllib.parse import quote

from django.conf import settings
from django.core.cache import cache
from django.test import override_settings

from audit.models import AccessLog
from memory.models import Memory, MemoryEvent
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth


def filtering_requests(where: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(method, path, body) of a request to each endpoint that filters, with `where`."""
    json_where = quote(json.dumps(where))
    return [
        ("post", "/v3/memories/search/", {"query": "tea", "filters": where}),
        ("post", "/v3/memories/", {"filters": where}),
        ("post", "/v1/exports/", {"filters": where}),
        ("post", "/v1/graph/traverse/", {"entity": "x", "filters": where}),
        ("get", f"/v1/graph/?filters={json_where}", None),
        ("get", f"/v1/memories/?filters={json_where}", None),
        ("delete", f"/v1/memories/?filters={json_where}", None),
    ]


class HostileTestCase(BaseTestCase):
    memories: ClassVar[list[Memory]]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        with project_context(cls.alice.key.project_id):
            cls.memories = add_texts(
                cls.alice.key.project, ["I love green tea", "My cat is Tom"], user_id="alice"
            )

    def raw(self, method: str, path: str, body: str) -> Any:
        """A request whose body is sent exactly as given (for escapes json.dumps won't write)."""
        return getattr(self.client, method)(
            path, body, content_type="application/json", headers=auth(self.alice.raw)
        )

    def rows(self) -> tuple[int, int]:
        with project_context(self.alice.key.project_id):
            return Memory.objects.count(), MemoryEvent.objects.count()

    def refused(self, response: Any, status: int = 400) -> str:
        assert response.status_code == status, (response.status_code, response.content[:300])
        detail = response.json()["detail"]
        assert isinstance(detail, str)
        assert detail
        return detail


class DeepNestingTestCase(HostileTestCase):
    def test_a_deeply_nested_body_is_a_400(self) -> None:
        before = self.rows()
        for depth in (40, 100_000):
            body = '{"query": "tea", "filters": ' + "[" * depth + "]" * depth + "}"
            detail = self.refused(self.raw("post", "/v3/memories/search/", body))
            assert "deeper" in detail
        body = (
            '{"messages": "I like tea", "user_id": "alice", "infer": false, "metadata": '
            + '{"a": ' * 50_000
            + "1"
            + "}" * 50_000
            + "}"
        )
        self.refused(self.raw("post", "/v3/memories/add/", body))
        assert self.rows() == before

    def test_a_deeply_nested_query_string_filter_is_a_400(self) -> None:
        for text in ("[" * 3000 + "]" * 3000, "{'a': " * 3000 + "1" + "}" * 3000):
            response = self.client.get(
                f"/v1/memories/?filters={quote(text)}", headers=auth(self.alice.raw)
            )
            self.refused(response)


class QueryStringFiltersTestCase(HostileTestCase):
    def get(self, filters: str) -> Any:
        return self.client.get(
            f"/v1/memories/?filters={quote(filters)}", headers=auth(self.alice.raw)
        )

    def test_json_and_the_clients_python_repr_are_accepted(self) -> None:
        for text in ('{"user_id": "alice"}', str({"user_id": "alice"})):
            response = self.get(text)
            assert response.status_code == 200, response.content
            assert {m["memory"] for m in response.json()} == {"I love green tea", "My cat is Tom"}
        nested = str({"AND": [{"user_id": "alice"}, {"NOT": {"keywords": {"icontains": "cat"}}}]})
        assert [m["memory"] for m in self.get(nested).json()] == ["I love green tea"]

    def test_anything_else_is_a_400(self) -> None:
        hostile = [
            "{[]: 1}",  # ast.literal_eval: TypeError (unhashable)
            "{'a': (1, 2)}",  # tuples are not JSON
            "{'a': {1, 2}}",  # sets
            "{'a': b'x'}",  # bytes
            "{'a': 1j}",  # complex
            "{'a': 1 + 2}",  # expressions
            "{'a': __import__('os')}",
            "{1: 'a'}",  # non-string keys
            "['user_id']",  # not an object
            "{'user_id': 'alice'} {}",
            "9" * 5000,  # int() digit limit
            "{'a': '" + "x" * 9000 + "'}",  # over the length cap
            "",
        ]
        for text in hostile:
            assert "filters" in self.refused(self.get(text)), text

    def test_delete_all_takes_the_python_repr_and_refuses_hostile_text(self) -> None:
        response = self.client.delete(
            f"/v1/memories/?filters={quote(str({'user_id': 'nobody'}))}",
            headers=auth(self.alice.raw),
        )
        assert response.status_code == 200
        before = self.rows()
        response = self.client.delete(
            f"/v1/memories/?filters={quote('{[]: 1}')}", headers=auth(self.alice.raw)
        )
        self.refused(response)
        assert self.rows() == before


class DatesTestCase(HostileTestCase):
    def test_dates_that_look_valid_but_are_not_are_a_400(self) -> None:
        for field, value in [
            ("created_at", "2024-02-30"),
            ("created_at", "2024-01-01T25:00:00"),
            ("updated_at", "2024-13-01"),
            ("expiration_date", "9999-12-31T23:00:00-05:00"),  # overflows moving to UTC
            ("created_at", "0001-01-01T00:00:00+05:00"),
        ]:
            body = {"query": "tea", "filters": {"user_id": "alice", field: {"gte": value}}}
            assert field in self.refused(self.call("post", "/v3/memories/search/", body))
            body = {"filters": {"user_id": "alice", field: {"lte": value}}}
            self.refused(self.call("post", "/v3/memories/", body))

    def test_a_timestamp_past_year_9999_is_a_400(self) -> None:
        before = self.rows()
        for infer in (True, False):
            body = {"messages": "I like tea", "user_id": "alice", "infer": infer}
            detail = self.refused(
                self.call("post", "/v3/memories/add/", {**body, "timestamp": 10**12})
            )
            assert detail.startswith("timestamp")
        path = f"/v1/memories/{self.memories[0].id}/"
        self.refused(self.call("put", path, {"text": "x", "timestamp": 10**12}))
        assert self.rows() == before
        # The last representable second is fine.
        response = self.call("put", path, {"text": "I love tea", "timestamp": 253402300799})
        assert response.status_code == 200
        assert response.json()["created_at"].startswith("9999-12-31T23:59:59")


class PagingTestCase(HostileTestCase):
    def test_unicode_and_huge_digits_in_paging_are_a_400(self) -> None:
        for path in ("/v1/events/", "/v1/entities/"):
            for name in ("page", "page_size"):
                for value in ("²", "\u0661", "1" * 5000, "-1", "0"):
                    response = self.client.get(
                        f"{path}?{name}={quote(value)}", headers=auth(self.alice.raw)
                    )
                    assert name in self.refused(response), (path, name, value)
        response = self.call("post", "/v3/memories/?page=%C2%B2", {"filters": {"user_id": "*"}})
        self.refused(response)


class UnstorableTextTestCase(HostileTestCase):
    def test_nul_and_lone_surrogates_in_a_body_are_a_400_anywhere(self) -> None:
        before = self.rows()
        bodies = [
            # Scope ids inside `filters` on add were never validated.
            '{"messages": "hi there", "filters": {"user_id": "a\\u0000b"}, "infer": false}',
            '{"messages": "I like tea", "user_id": "alice", "metadata": {"k": "\\u0000"}}',
            '{"messages": "I like tea", "user_id": "alice", "metadata": {"\\u0000": 1}}',
            '{"messages": "I like tea \\ud800", "user_id": "alice", "infer": false}',
            '{"messages": "I like tea", "user_id": "alice", "custom_categories": ["\\udfff"]}',
            '{"messages": [{"role": "user", "content": "x", "name": "\\u0000"}], "user_id": "a"}',
        ]
        for body in bodies:
            detail = self.refused(self.raw("post", "/v3/memories/add/", body))
            assert "NUL" in detail or "surrogate" in detail, detail
        for body in [
            '{"query": "tea", "filters": {"metadata": {"k": "\\u0000"}}}',
            '{"query": "tea", "categories": ["\\ud800"]}',
            '{"query": "\\u0000"}',
        ]:
            self.refused(self.raw("post", "/v3/memories/search/", body))
        self.refused(self.raw("post", "/v1/exports/", '{"schema": {"\\u0000": 1}}'))
        self.refused(self.raw("post", "/v1/feedback/", '{"memory_id": "\\u0000"}'))
        settings = (
            '{"entities": {"user": {"schema": {"properties": {"a": {"description": "\\u0000"}}}}}}'
        )
        self.refused(self.raw("post", "/v2/profiles/settings/", settings))
        self.refused(
            self.raw(
                "post", "/v2/profiles/jobs/", '{"operation": "trigger", "entity_id": "\\ud800"}'
            )
        )
        assert self.rows() == before

    def test_nul_in_a_path_or_query_string_is_a_400(self) -> None:
        before = self.rows()
        for method, path in [
            ("delete", "/v2/entities/user/al%00ice/"),
            ("get", "/v1/memories/?user_id=al%00ice"),
            ("delete", "/v1/memories/?user_id=al%00ice"),
            ("get", "/v1/events/?status=%00"),
            ("get", "/v2/entities/user/al%00ice/profile/"),
        ]:
            response = getattr(self.client, method)(path, headers=auth(self.alice.raw))
            assert "NUL" in self.refused(response), path
        assert self.rows() == before

    def test_over_long_scope_ids_in_filters_on_add_are_a_400(self) -> None:
        before = self.rows()
        body = {"messages": "I like tea", "filters": {"user_id": "u" * 256}, "infer": False}
        detail = self.refused(self.call("post", "/v3/memories/add/", body))
        assert detail.startswith("filters.user_id")
        assert self.rows() == before

    def test_scope_ids_no_memory_can_have_are_a_400_at_every_entry_point(self) -> None:
        """Over 255 characters, or empty: refused on add, and (issue #24) once accepted in the
        filters of every endpoint and in DELETE /v1/memories/'s query string."""
        before = self.rows()
        long = "u" * 256
        filters: list[dict[str, Any]] = [
            {"user_id": long},
            {"agent_id": {"in": ["bot", long]}},
            {"OR": [{"user_id": "alice"}, {"run_id": {"ne": long}}]},
            {"NOT": {"app_id": long}},
            {"user_id": ""},
        ]
        for where in filters:
            for method, path, body in filtering_requests(where):
                response = self.call(method, path, body)
                assert "filters" in self.refused(response), (where, path)
        for query in (f"user_id={long}", "user_id=&agent_id=bot", f"run_id={long}&user_id=alice"):
            response = self.client.delete(f"/v1/memories/?{query}", headers=auth(self.alice.raw))
            assert "_id: must" in self.refused(response), query
        for method, path in [
            ("delete", f"/v2/entities/agent/{long}/"),
            ("post", f"/v1/users/{long}/dashboard-link/"),
        ]:
            response = getattr(self.client, method)(path, headers=auth(self.alice.raw))
            assert "at most 255 characters" in self.refused(response), path
        assert self.rows() == before
        # The longest id is an id like any other.
        body = {"query": "tea", "filters": {"user_id": "u" * 255}}
        assert self.call("post", "/v3/memories/search/", body).json()["results"] == []

    def test_infinite_numbers_in_json_are_a_400(self) -> None:
        body = '{"messages": "I like tea", "user_id": "alice", "metadata": {"n": 1e400}}'
        assert "finite" in self.refused(self.raw("post", "/v3/memories/add/", body))


class EmptyListsTestCase(HostileTestCase):
    def test_empty_lists_in_search_filters_find_nothing(self) -> None:
        for filters in [
            {"memory_ids": []},
            {"user_id": {"in": []}},
            {"OR": []},
            {"AND": [{"user_id": "alice"}, {"categories": {"in": []}}]},
        ]:
            for path in ("/v3/memories/search/", "/v2/memories/search/"):
                response = self.call("post", path, {"query": "tea", "filters": filters})
                assert response.status_code == 200, (filters, response.content)
                body = response.json()
                assert (body["results"] if isinstance(body, dict) else body) == []


class BoundedCostTestCase(HostileTestCase):
    def test_oversized_filters_are_refused_before_any_work(self) -> None:
        huge = [
            {"metadata": {f"k{i}": "v" for i in range(10_000)}},
            {"OR": [{"user_id": f"u{i}"} for i in range(20_000)]},
            {"memory_ids": [str(m.id) for m in self.memories] * 20_000},
            {"user_id": {"in": [f"u{i}" for i in range(5_000)]}},
        ]
        for filters in huge:
            response = self.call("post", "/v3/memories/search/", {"query": "t", "filters": filters})
            detail = self.refused(response)
            assert "filters hold more than" in detail, detail

    @override_settings(ENGRAM_MAX_FILTER_OPERAND_CHARS=20, ENGRAM_MAX_FILTER_TEXT_CONDITIONS=3)
    def test_text_matches_are_capped_in_characters_and_in_number_everywhere(self) -> None:
        """46 keyword operands of 2 KB over 20 long memories once took 31-44 s (issue #24)."""
        before = self.rows()
        refused: list[tuple[dict[str, Any], str]] = [
            ({"keywords": {"contains": "x" * 21}}, "20 (ENGRAM_MAX_FILTER_OPERAND_CHARS)"),
            (
                {"OR": [{"keywords": "green tea"}, {"NOT": {"keywords": {"icontains": "x" * 12}}}]},
                "20 (ENGRAM_MAX_FILTER_OPERAND_CHARS)",
            ),
            (
                {"metadata": {"k": {"contains": "x" * 15}}, "categories": {"contains": "y" * 6}},
                "20 (ENGRAM_MAX_FILTER_OPERAND_CHARS)",
            ),
            (
                {"AND": [{"keywords": {"icontains": c, "contains": c}} for c in "ab"]},
                "3 (ENGRAM_MAX_FILTER_TEXT_CONDITIONS)",
            ),
        ]
        for unscoped, limit in refused:
            for method, path, body in filtering_requests({"user_id": "alice", **unscoped}):
                detail = self.refused(self.call(method, path, body))
                assert detail.endswith(f"the limit is {limit}."), (path, detail)
        assert self.rows() == before
        # At both limits, a filter reads as before.
        texts: list[dict[str, Any]] = [
            {"keywords": {"icontains": "GREEN TEA"}},
            {"keywords": "cat"},
            {"metadata": {"k": {"contains": "x" * 8}}},
        ]
        where = {"OR": texts}
        found = self.call("post", "/v3/memories/", {"filters": {"user_id": "alice", **where}})
        assert sorted(m["memory"] for m in found.json()["results"]) == [
            "I love green tea",
            "My cat is Tom",
        ]

    def test_the_hostile_keyword_filter_of_issue_24_is_refused(self) -> None:
        operands = [f"{'a' * 2040}b{i:07d}" for i in range(46)]
        where = {"user_id": "alice", "OR": [{"keywords": {"contains": o}} for o in operands]}
        body = {"query": "x", "filters": where}
        detail = self.refused(self.call("post", "/v3/memories/search/", body))
        assert "ENGRAM_MAX_FILTER_OPERAND_CHARS" in detail

    def test_a_filter_within_the_limits_still_works(self) -> None:
        ids = [str(m.id) for m in self.memories]
        body = {"query": "tea", "filters": {"OR": [{"user_id": "alice"}] * 50, "memory_ids": ids}}
        response = self.call("post", "/v3/memories/search/", body)
        assert response.status_code == 200
        assert response.json()["results"][0]["memory"] == "I love green tea"

    @override_settings(ENGRAM_MAX_TEXT_CHARS=100)
    def test_one_length_limit_for_every_text_written(self) -> None:
        before = self.rows()
        memory = self.memories[0]
        long_text = "x" * 101
        attempts = [
            ("post", "/v3/memories/add/", {"messages": long_text, "user_id": "a", "infer": False}),
            ("put", f"/v1/memories/{memory.id}/", {"text": long_text}),
            ("put", "/v1/batch/", {"memories": [{"memory_id": str(memory.id), "text": long_text}]}),
            ("post", "/v1/feedback/", {"memory_id": str(memory.id), "feedback_reason": long_text}),
            ("post", "/v1/exports/", {"schema": {"k": long_text}}),
            ("patch", f"/api/v1/orgs/organizations/{memory.project.organization_id}/projects/"
                      f"{memory.project_id}/", {"custom_instructions": long_text}),
            ("post", "/v3/memories/add/", {"messages": "hi", "user_id": "a",
                                           "metadata": {"k": long_text}}),
        ]  # fmt: skip
        for method, path, body in attempts:
            detail = self.refused(self.call(method, path, body))
            assert "the limit is 100" in detail, (path, detail)
        assert self.rows() == before

    def test_whitespace_only_text_is_refused_everywhere(self) -> None:
        memory = self.memories[0]
        for method, path, body in [
            ("put", f"/v1/memories/{memory.id}/", {"text": " \n\t "}),
            ("put", "/v1/batch/", {"memories": [{"memory_id": str(memory.id), "text": "   "}]}),
            ("post", "/v3/memories/add/", {"messages": "   ", "user_id": "a", "infer": False}),
        ]:
            assert "whitespace" in self.refused(self.call(method, path, body)), path
        with project_context(self.alice.key.project_id):
            memory.refresh_from_db()
        assert memory.text == "I love green tea"

    @override_settings(ENGRAM_MAX_EXPORT_MEMORIES=1)
    def test_an_export_over_the_cap_is_refused(self) -> None:
        detail = self.refused(self.call("post", "/v1/exports/", {"filters": {"user_id": "alice"}}))
        assert "More than 1 memories match" in detail
        response = self.call(
            "post", "/v1/exports/", {"filters": {"keywords": {"icontains": "tea"}}}
        )
        assert response.status_code == 201


class EntitiesPagingTestCase(HostileTestCase):
    def test_entities_are_paginated_with_totals_over_all_pages(self) -> None:
        with project_context(self.alice.key.project_id):
            add_texts(self.alice.key.project, ["I sail"], user_id="bob", agent_id="bot")
        first = self.client.get("/v1/entities/?page_size=2", headers=auth(self.alice.raw)).json()
        assert first["count"] == 3
        assert (first["total_users"], first["total_agents"]) == (2, 1)
        assert [(e["type"], e["id"]) for e in first["results"]] == [
            ("user", "alice"),
            ("user", "bob"),
        ]
        assert first["next"] is not None
        second = self.client.get(first["next"], headers=auth(self.alice.raw)).json()
        assert [(e["type"], e["id"], e["total_memories"]) for e in second["results"]] == [
            ("agent", "bot", 1)
        ]


@override_settings(
    REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api_key": "3/minute"}}
)
class ThrottleTestCase(HostileTestCase):
    def setUp(self) -> None:
        cache.clear()

    def test_a_key_over_its_rate_gets_429_with_retry_after(self) -> None:
        statuses = [
            self.client.get("/v1/ping/", headers=auth(self.alice.raw)).status_code for _ in range(4)
        ]
        over = self.client.get("/v1/ping/", headers=auth(self.alice.raw))
        other_key = self.client.get("/v1/ping/", headers=auth(self.charlie.raw))
        assert statuses == [200, 200, 200, 429]
        assert over.status_code == 429
        assert int(over["Retry-After"]) > 0
        assert "throttled" in over.json()["detail"]
        assert other_key.status_code == 200
        # Refused requests are still in the access log, with their status.
        with project_context(self.alice.key.project_id):
            assert AccessLog.objects.filter(status=429).count() == 2


class AdminLoginLimitTestCase(HostileTestCase):
    def setUp(self) -> None:
        cache.clear()

    @override_settings(ENGRAM_ADMIN_LOGIN_ATTEMPTS=3)
    def test_failed_admin_logins_are_limited_per_account_and_address(self) -> None:
        from django.contrib.auth.models import User

        User.objects.create_superuser("root", "root@example.com", "correct horse battery")
        User.objects.create_superuser("olga", "olga@example.com", "another long passphrase")
        wrong = {"username": "root", "password": "guess"}
        statuses = [self.client.post("/admin/login/", wrong).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        # Even the right password is not checked while the account is locked out here (its
        # name counted without case or surrounding spaces) ...
        right = {"username": "Root ", "password": "correct horse battery"}
        locked = self.client.post("/admin/login/", right)
        assert locked.status_code == 429
        assert int(locked["Retry-After"]) > 0
        # ... the styled page says so, and it is not the plain text it was.
        page = locked.content.decode()
        assert locked["Content-Type"].startswith("text/html")
        assert "<h1>Too many failed logins</h1>" in page and "this account" in page
        # Another operator behind the same address (an office, a proxy) still logs in, and so
        # does the same account from another address.
        olga = self.client_class().post(
            "/admin/login/", {"username": "olga", "password": "another long passphrase"}
        )
        assert olga.status_code == 302
        exact = {"username": "root", "password": "correct horse battery"}
        assert self.client.post("/admin/login/", exact).status_code == 429
        other = self.client.post("/admin/login/", exact, REMOTE_ADDR="127.0.0.2")
        assert other.status_code == 302

    @override_settings(ENGRAM_ADMIN_LOGIN_ATTEMPTS=3, ENGRAM_LOGIN_ADDRESS_ATTEMPTS=5)
    def test_a_password_spray_from_one_address_is_refused_for_every_account(self) -> None:
        from django.contrib.auth.models import User

        User.objects.create_superuser("root", "root@example.com", "correct horse battery")
        sprayed = [
            self.client.post("/dashboard/login/", {"username": f"u{n}", "password": "x"})
            for n in range(6)
        ]
        assert [r.status_code for r in sprayed] == [200] * 5 + [429]
        assert "this address" in sprayed[-1].content.decode()
        right = {"username": "root", "password": "correct horse battery"}
        assert self.client.post("/dashboard/login/", right).status_code == 429
        other = self.client.post("/dashboard/login/", right, REMOTE_ADDR="127.0.0.3")
        assert other.status_code == 302

    @override_settings(ENGRAM_ADMIN_LOGIN_ATTEMPTS=3)
    def test_the_dashboard_login_shares_the_limit_and_its_count(self) -> None:
        from django.contrib.auth.models import User

        User.objects.create_superuser("root", "root@example.com", "correct horse battery")
        wrong = {"username": "root", "password": "guess"}
        paths = ["/dashboard/login/", "/admin/login/", "/dashboard/login/", "/dashboard/login/"]
        statuses = [self.client.post(path, wrong).status_code for path in [*paths, "/admin/login/"]]
        assert statuses == [200, 200, 200, 429, 429]
        right = {"username": "root", "password": "correct horse battery"}
        locked = self.client.post("/dashboard/login/", right)
        assert locked.status_code == 429
        assert "Too many failed logins" in locked.content.decode()
        assert int(locked["Retry-After"]) > 0
        assert "_auth_user_id" not in self.client.session
        other = self.client.post("/dashboard/login/", right, REMOTE_ADDR="127.0.0.2")
        assert other.status_code == 302


class ErrorShapeTestCase(HostileTestCase):
    def test_every_400_lists_its_messages_by_field(self) -> None:
        refusals = [
            (self.client.delete("/v1/memories/", headers=auth(self.alice.raw)),
             "non_field_errors"),
            (self.client.get("/v1/events/?page=%C2%B2", headers=auth(self.alice.raw)), "page"),
            (self.call("post", "/v3/memories/search/", {"query": "x", "filters": {"x": 1}}),
             "filters"),
            (self.call("post", "/v3/memories/search/", {"query": "x", "top_k": 0}), "top_k"),
        ]  # fmt: skip
        for response, field in refusals:
            body = response.json()
            assert response.status_code == 400
            assert list(body["errors"]) == [field], body
            messages = body["errors"][field]
            assert isinstance(messages, list), body
            assert all(isinstance(m, str) for m in messages), body
            assert messages[0] in body["detail"]
