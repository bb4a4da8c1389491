from __future__ import annotations

from typing import Any, ClassVar

from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from memory.models import Memory
from memory.search import DEFAULT_THRESHOLD
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth

FACTS = [
    "I love dark roast coffee in the morning",
    "My sister Maria lives in Lisbon",
    "I am allergic to peanuts",
    "We adopted a beagle called Toby last spring",
    "I work as a nurse at the city hospital",
]


class SearchTestCase(BaseTestCase):
    memories: ClassVar[list[Memory]]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        with project_context(cls.alice.key.project_id):
            cls.memories = add_texts(cls.alice.key.project, FACTS, user_id="alice")
            add_texts(cls.alice.key.project, ["Bob drinks green tea"], user_id="bob")
            add_texts(
                cls.alice.key.project,
                ["Alice's agent prefers espresso"],
                user_id="alice",
                agent_id="bot",
            )

    def search(self, body: dict[str, Any], path: str = "/v3/memories/search/") -> Any:
        response = self.client.post(
            path, body, content_type="application/json", headers=auth(self.alice.raw)
        )
        return response

    def test_it_ranks_the_semantically_closest_memory_first(self) -> None:
        cases = {
            "what does the user drink in the morning?": FACTS[0],
            "does the user have any pets?": FACTS[3],
            "which food allergies?": FACTS[2],
            "where does Maria live": FACTS[1],
        }
        for query, expected in cases.items():
            results = self.search({"query": query, "filters": {"user_id": "alice"}}).json()[
                "results"
            ]
            assert results[0]["memory"] == expected, query

    def test_it_returns_scores_in_range_with_a_breakdown(self) -> None:
        results = self.search({"query": "coffee", "filters": {"user_id": "alice"}}).json()[
            "results"
        ]
        assert results
        for result in results:
            assert 0 <= result["score"] <= 1
            assert set(result["score_breakdown"]) == {
                "semantic",
                "bm25",
                "entity",
                "relevance",
                "distinctiveness",
                "answer_gap",
                "ranker",
            }
            # The fitted file that scored it: the bundled model's, by name and digest.
            assert result["score_breakdown"]["ranker"].startswith("local:all-MiniLM-L6-v2@")
        assert results[0]["score_breakdown"]["bm25"] > 0  # "coffee" is a keyword hit

    def test_it_keeps_to_the_filtered_scope(self) -> None:
        results = self.search({"query": "coffee or tea", "filters": {"user_id": "bob"}}).json()[
            "results"
        ]
        assert [r["memory"] for r in results] == ["Bob drinks green tea"]
        both = {"AND": [{"user_id": "alice"}, {"agent_id": "*"}]}
        results = self.search({"query": "coffee", "filters": both}).json()["results"]
        assert [r["memory"] for r in results] == ["Alice's agent prefers espresso"]

    def test_it_honours_top_k_and_threshold(self) -> None:
        body = {"query": "coffee", "filters": {"user_id": "alice"}, "top_k": 2, "threshold": 0}
        assert len(self.search(body).json()["results"]) == 2
        # The threshold cuts on the score the caller sees, and on nothing else.
        everything = self.search({**body, "top_k": 20}).json()["results"]
        for threshold in (0.3, 0.5, 0.7, 0.9):
            cut = self.search({**body, "top_k": 20, "threshold": threshold}).json()["results"]
            assert cut == [r for r in everything if r["score"] >= threshold], threshold
        # Alice's scope: her FACTS and the memory she shares with her agent.
        assert len({len(r) for r in everything}) == 1 and len(everything) == len(FACTS) + 1

    def test_nothing_relevant_is_an_answer(self) -> None:
        """At the default threshold a question about something the scope never mentions finds
        nothing; one it answers finds its answer first."""
        scoped = {"filters": {"user_id": "alice"}}
        for query in ("What is her blood type?", "quantum chromodynamics"):
            assert self.search({**scoped, "query": query}).json()["results"] == [], query
        found = self.search({**scoped, "query": "Does she have any pets?"}).json()["results"]
        assert found[0]["memory"] == FACTS[3] and found[0]["score"] >= DEFAULT_THRESHOLD

    def test_it_says_when_nothing_is_relevant_and_how_near_it_came(self) -> None:
        scoped = {"filters": {"user_id": "alice"}}
        body = self.search({**scoped, "query": "What is her blood type?"}).json()
        assert (body["results"], body["nothing_relevant"]) == ([], True)
        assert 0 < body["best_score"] < DEFAULT_THRESHOLD
        # The best score is the one a threshold of 0 would have put first.
        everything = self.search({**scoped, "query": "What is her blood type?", "threshold": 0})
        assert body["best_score"] == everything.json()["results"][0]["score"]
        found = self.search({**scoped, "query": "Does she have any pets?"}).json()
        assert found["nothing_relevant"] is False and "best_score" not in found

    def test_it_says_nothing_relevant_with_no_best_score_in_an_empty_scope(self) -> None:
        response = self.search({"query": "coffee", "filters": {"user_id": "nobody"}})
        assert response.json() == {"results": [], "nothing_relevant": True, "best_score": None}
        assert response.headers["Engram-Nothing-Relevant"] == "true"
        assert "Engram-Best-Score" not in response.headers

    def test_it_says_it_in_headers_on_a_bare_list(self) -> None:
        for path in ("/v2/memories/search/", "/v1/memories/search/"):
            off = self.search({"query": "quantum chromodynamics", "user_id": "alice"}, path)
            assert off.json() == [], path
            assert off.headers["Engram-Nothing-Relevant"] == "true", path
            assert float(off.headers["Engram-Best-Score"]) < DEFAULT_THRESHOLD, path
            on = self.search({"query": "coffee", "user_id": "alice"}, path)
            assert on.headers["Engram-Nothing-Relevant"] == "false", path
            assert float(on.headers["Engram-Best-Score"]) == on.json()[0]["score"], path

    def test_it_says_it_in_every_object_answer(self) -> None:
        off = {"query": "quantum chromodynamics", "user_id": "alice"}
        for extra in ({"output_format": "v1.1"}, {"enable_graph": True}):
            body = self.search({**off, **extra}, "/v2/memories/search/").json()
            assert (body["results"], body["nothing_relevant"]) == ([], True), extra
            assert body["best_score"] < DEFAULT_THRESHOLD, extra

    def test_it_answers_v1_and_v2_with_a_bare_list(self) -> None:
        for path in ("/v2/memories/search/", "/v1/memories/search/"):
            response = self.search({"query": "coffee", "user_id": "alice"}, path=path)
            assert isinstance(response.json(), list), path
            assert response.json()[0]["memory"] == FACTS[0], path

    def test_it_answers_v1_and_v2_with_an_object_when_asked_for_v1_1(self) -> None:
        # What CrewAI's Mem0Storage sends (it then reads response["results"]).
        crewai = {"query": "coffee", "limit": 3, "version": "v2", "output_format": "v1.1"}
        for path in ("/v2/memories/search/", "/v1/memories/search/"):
            body = self.search({**crewai, "user_id": "alice"}, path=path).json()
            assert (body["results"][0]["memory"], body["relations"]) == (FACTS[0], []), path
            explicit = self.search({**crewai, "user_id": "alice", "output_format": "v1.0"}, path)
            assert isinstance(explicit.json(), list), path

    def test_it_answers_v3_with_an_object_whatever_the_output_format(self) -> None:
        body = {"query": "coffee", "filters": {"user_id": "alice"}, "output_format": "v1.0"}
        assert self.search(body).json()["results"][0]["memory"] == FACTS[0]

    def test_it_shows_no_categories_as_null(self) -> None:
        # LlamaIndex's Mem0Memory prefixes "[categories] : " whenever they are not None.
        body = {"query": "coffee", "filters": {"user_id": "alice"}}
        assert self.search(body).json()["results"][0]["categories"] is None

    def test_it_hides_expired_memories_unless_asked(self) -> None:
        with project_context(self.alice.key.project_id):
            self.memories[0].expiration_date = self.memories[0].created_at.date().replace(year=2000)
            self.memories[0].save()
        body = {"query": "dark roast coffee", "filters": {"user_id": "alice"}, "threshold": 0}
        assert FACTS[0] not in [r["memory"] for r in self.search(body).json()["results"]]
        shown = self.search({**body, "show_expired": True}).json()["results"]
        assert shown[0]["memory"] == FACTS[0]

    @override_settings(ENGRAM_EMBEDDING_CHECK_SECONDS=3600)
    def test_it_searches_in_a_fixed_number_of_queries(self) -> None:
        body = {"query": "coffee", "filters": {"user_id": "alice"}}
        # Warm the embedder (and its read of the deployment's embedding model, once per
        # ENGRAM_EMBEDDING_CHECK_SECONDS per process: not per request).
        self.search(body)
        with CaptureQueriesContext(connection) as queries:
            self.search(body)
        statements = [q["sql"][:40] for q in queries if "SAVEPOINT" not in q["sql"]]
        # 1 key lookup, then one transaction: 2 tenant context, 3 the names the scope's user
        # goes by (one indexed read), 4 the search, 5 the access-log row (last_used_at was
        # stamped moments ago, so it is not written again; a default search reads no
        # linked_memory_ids). The test runs in a transaction of its own, so the tenant is then
        # restored: 6, not in production.
        assert len(statements) == 6, statements
        assert statements[1] == statements[-1] == "SELECT set_config('engram.project_id', '"
        assert statements[2].startswith("\nSELECT m.text FROM") and statements[3].startswith(
            "WITH "
        )
        assert statements[1] == statements[-1] == "SELECT set_config('engram.project_id', '"

    def test_it_refuses_bad_input(self) -> None:
        cases: list[dict[str, Any]] = [
            {"filters": {"user_id": "alice"}},
            {"query": "x", "top_k": 0},
            {"query": "x", "top_k": 1001},
            {"query": "x", "threshold": 2},
            {"query": "x", "filters": {"colour": "red"}},
            {"query": "x", "filters": {"user_id": {"like": "a%"}}},
            {"query": "x", "filters": "user_id=alice"},
            {"query": "x", "output_format": "v2"},
        ]
        for body in cases:
            response = self.search(body)
            assert response.status_code == 400, body
            assert response.json()["detail"], body

    def test_it_names_the_unknown_filter_field(self) -> None:
        response = self.search({"query": "x", "filters": {"colour": "red"}})
        assert "'colour'" in response.json()["detail"]
