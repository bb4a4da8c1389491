"""Search chooses between the exact scan and the HNSW index in one place, for every caller
(memory.retrieval.search.scope_bounded): exact when the memories searched are bounded to the
scopes the filter names, the index otherwise."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import queries
from memory.models import Memory
from memory.retrieval.filters import compile_filters
from memory.retrieval.search import STATEMENT_STARTS, _scope_where, hybrid_search, scope_bounded
from memory.text.query import analyse
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth

PROJECT = uuid.uuid4()
# The exact path: the scope's single pass has each row's distance (the query vector
# interpolated), and the semantic candidates are the closest rows of it.
EXACT = re.compile(
    r"SELECT id, embedding <=> '[^']+'::vector AS distance,.*"
    r"SELECT id FROM scope_pass ORDER BY distance, id LIMIT",
    re.DOTALL,
)
# The index is on the cast to the embedding space's dimension (memory.models.embedding).
INDEXED = re.compile(r"ORDER BY \(embedding::vector\(384\)\) <=> '[^']+'::vector\(384\) LIMIT")

BOUNDED = [
    {"user_id": "alice"},
    {"user_id": 42},
    {"user_id": {"eq": "alice"}},
    {"user_id": {"in": ["alice", "bob"]}},
    {"AND": [{"user_id": "alice"}, {"categories": {"in": ["food"]}}]},
    {"OR": [{"user_id": "alice"}, {"agent_id": "helper"}]},
    {"user_id": "alice", "OR": [{"categories": {"in": ["food"]}}, {"keywords": "tea"}]},
]
UNBOUNDED = [
    {},
    {"user_id": "*"},
    {"user_id": {"ne": "alice"}},
    {"NOT": [{"user_id": "alice"}]},
    {"OR": [{"user_id": "alice"}, {"categories": {"in": ["food"]}}]},
    {"categories": {"in": ["food"]}},
]


@pytest.mark.parametrize("filters", BOUNDED)
def test_a_search_bounded_to_named_scopes_ranks_exactly(filters: dict[str, Any]) -> None:
    assert scope_bounded(queries.matching(PROJECT, compile_filters(filters)))


@pytest.mark.parametrize("filters", UNBOUNDED)
def test_a_wider_search_walks_the_index(filters: dict[str, Any]) -> None:
    assert not scope_bounded(queries.matching(PROJECT, compile_filters(filters)))


def test_the_dashboards_selections_are_bounded_by_their_scope() -> None:
    assert scope_bounded(queries.user_memories(PROJECT, "alice"))
    assert scope_bounded(queries.browse_memories(PROJECT, scope={"agent_id": "helper"}))
    assert not scope_bounded(queries.browse_memories(PROJECT, scope={}))


class SearchStatementTestCase(BaseTestCase):
    """Through the API: the exact path ranks the scope's single pass by distance, the index
    path orders the table by the bare operator."""

    def setUp(self) -> None:
        super().setUp()
        add_texts(self.alice.key.project, ["I drink green tea"], user_id="alice")

    def statement(self, filters: dict[str, Any]) -> str:
        with CaptureQueriesContext(connection) as captured:
            response = self.client.post(
                "/v2/memories/search/", {"query": "tea", "filters": filters},
                content_type="application/json", headers=auth(self.alice.raw),
            )  # fmt: skip
        assert response.status_code == 200, response.content
        (sql,) = [
            q["sql"] for q in captured.captured_queries if q["sql"].startswith(STATEMENT_STARTS)
        ]
        return sql

    def test_a_users_search_is_exact_and_a_wildcard_one_uses_the_index(self) -> None:
        assert EXACT.search(self.statement({"user_id": "alice"}))
        assert EXACT.search(self.statement({"OR": [{"user_id": "alice"}, {"user_id": "bob"}]}))
        wide = self.statement({"user_id": "*"})
        assert INDEXED.search(wide)
        assert not EXACT.search(wide)


class ScopeConditionTestCase(BaseTestCase):
    """The caller's queryset is compiled once into the condition every part of the statement
    repeats (memory.retrieval.search._scope_where): its WHERE clause, or, when it joins another
    table, the ids it selects; a queryset with no condition searches the tenant's memories."""

    def setUp(self) -> None:
        super().setUp()
        self.project = self.alice.key.project
        with project_context(self.project.pk):
            add_texts(self.project, ["I drink green tea every morning"], user_id="alice")
            add_texts(self.project, ["Bob drinks black tea at night"], user_id="bob")

    def found(self, memories: Any, text: str = "tea") -> set[str]:
        with project_context(self.project.pk):
            hits = hybrid_search(memories, analyse(text), top_k=10, threshold=0)
        return {hit.memory.text for hit in hits}

    def test_the_apis_memories_are_their_where_clause(self) -> None:
        memories = queries.matching(self.project.pk, compile_filters({"user_id": "alice"}))
        where, params = _scope_where(memories)
        assert where.startswith('(("memory_memory"."project_id" = %s AND')
        assert "SELECT" not in where and params[:2] == (self.project.pk, "alice")

    def test_a_join_is_searched_through_its_ids(self) -> None:
        alice = queries.matching(self.project.pk, compile_filters({"user_id": "alice"}))
        joined = alice.filter(project__name=self.project.name)
        assert set(joined.query.alias_map) != {"memory_memory"}  # the condition joins
        assert self.found(joined) == {"I drink green tea every morning"}
        assert self.found(alice.filter(project__name=f"not {self.project.name}")) == set()
        # The same through extra(): the other table is named in FROM, not as a join.
        named = alice.extra(
            tables=["tenants_project"],
            where=["tenants_project.id = memory_memory.project_id", "tenants_project.name = %s"],
            params=[self.project.name],
        )
        assert self.found(named) == {"I drink green tea every morning"}

    def test_no_condition_is_every_memory_the_tenant_may_read(self) -> None:
        assert self.found(Memory.objects.all()) == {
            "I drink green tea every morning",
            "Bob drinks black tea at night",
        }

    def test_a_condition_that_cannot_match_finds_nothing(self) -> None:
        assert self.found(Memory.objects.filter(pk__in=[])) == set()
