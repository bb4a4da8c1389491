"""Search with `rerank: true` (memory.rerank, memory.search.reranked): a reranker service in
Cohere's and TEI's shapes (tests/fake_rerank.py) and the extraction model as a judge (the fake
Messages and Chat Completions APIs of tests/fake_anthropic.py, through the real SDKs).

The fake service ranks the candidates in reverse, so a reranked answer is the fused one turned
around; every way it can fail leaves the fused order, and the answer says which it is.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext

from memory.actions import do_count_rerank
from memory.graph import Relation
from memory.models import Memory, RerankUsageDay
from memory.rerank import RerankError, endpoint_ranking, judge_ranking, permutation
from memory.search import Found, _kept
from tenants.actions import NewApiKey
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth, make_key
from tests.fake_anthropic import FakeClaude, Reply
from tests.fake_rerank import FakeReranker, running

FACTS = [
    "I love dark roast coffee in the morning",
    "My sister Maria lives in Lisbon",
    "I am allergic to peanuts",
    "We adopted a beagle called Toby last spring",
    "I work as a nurse at the city hospital",
]
# Every memory of the scope passes: the fused order is the whole scope's.
ALL = {"query": "what do I drink in the morning?", "filters": {"user_id": "alice"}, "threshold": 0}
SIGNALS = {"semantic", "bm25", "entity", "relevance", "distinctiveness", "answer_gap", "ranker"}


@pytest.fixture
def fake_rerank() -> Iterator[FakeReranker]:
    with running(FakeReranker()) as fake:
        yield fake


class _Search(BaseTestCase):
    memories: ClassVar[list[Memory]]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        with project_context(cls.alice.key.project_id):
            cls.memories = add_texts(cls.alice.key.project, FACTS, user_id="alice")

    def search(self, **body: Any) -> Any:
        return self.call("post", "/v3/memories/search/", {**ALL, **body})

    def texts(self, response: Any) -> list[str]:
        return [r["memory"] for r in response.json()["results"]]

    def fused(self, **body: Any) -> list[str]:
        return self.texts(self.search(**body))

    def usage(self, project_id: uuid.UUID | None = None) -> list[tuple[int, ...]]:
        """The project's rerank usage rows: searches, reranked, calls, input and output tokens."""
        fields = ("searches", "reranked", "calls", "input_tokens", "output_tokens")
        with project_context(project_id or self.alice.key.project_id):
            return list(RerankUsageDay.objects.values_list(*fields))


class EndpointTestCase(_Search):
    @pytest.fixture(autouse=True)
    def _reranker(self, fake_rerank: FakeReranker, settings: Any) -> None:
        self.fake = fake_rerank
        self.fake.watch = connections["default"]
        settings.ENGRAM_RERANK = "endpoint"
        settings.ENGRAM_RERANK_URL = fake_rerank.url
        settings.ENGRAM_RERANK_API = "cohere"
        settings.ENGRAM_RERANK_MODEL = "rerank-test"
        settings.ENGRAM_RERANK_API_KEY = "sk-rerank"
        settings.ENGRAM_RERANK_TIMEOUT_MS = 1000
        self.settings_ = settings

    def test_it_reorders_the_results_in_the_rerankers_order(self) -> None:
        fused = self.fused()
        response = self.search(rerank=True)
        assert self.texts(response) == fused[::-1]
        assert response.json()["reranked"] is True
        assert response.headers["Engram-Reranked"] == "true"

    def test_it_sends_cohere_s_body_with_the_model_and_key(self) -> None:
        fused = self.fused()
        self.search(rerank=True)
        request = self.fake.requests[-1]
        assert request["path"] == "/rerank"
        assert request["headers"]["Authorization"] == "Bearer sk-rerank"
        body = request["body"]
        assert body == {"model": "rerank-test", "query": ALL["query"], "documents": fused,
                        "top_n": len(fused)}  # fmt: skip

    def test_it_speaks_text_embeddings_inference(self) -> None:
        self.settings_.ENGRAM_RERANK_API = "tei"
        fused = self.fused()
        response = self.search(rerank=True)
        assert self.fake.requests[-1]["body"] == {"query": ALL["query"], "texts": fused}
        assert self.texts(response) == fused[::-1]

    def test_it_adds_the_rerankers_relevance_to_the_breakdown(self) -> None:
        results = self.search(rerank=True).json()["results"]
        assert [set(r["score_breakdown"]) for r in results] == [{*SIGNALS, "rerank"}] * 5
        assert [r["score_breakdown"]["rerank"] for r in results] == [1.0, 0.8, 0.6, 0.4, 0.2]

    def test_it_keeps_the_fused_scores_and_threshold(self) -> None:
        fused = {r["memory"]: r["score"] for r in self.search(threshold=0.5).json()["results"]}
        reranked = self.search(threshold=0.5, rerank=True).json()["results"]
        assert {r["memory"]: r["score"] for r in reranked} == fused

    def test_it_reranks_the_top_n_then_cuts_to_top_k(self) -> None:
        fused = self.fused()
        response = self.search(rerank=True, top_k=2)
        assert len(self.fake.requests[-1]["body"]["documents"]) == 5  # max(top_k, TOP_N)
        assert self.texts(response) == fused[::-1][:2]

    def test_it_reranks_only_the_top_n(self) -> None:
        self.settings_.ENGRAM_RERANK_TOP_N = 3
        fused = self.fused()
        response = self.search(rerank=True)
        assert self.fake.requests[-1]["body"]["documents"] == fused[:3]
        assert self.texts(response) == [*fused[:3][::-1], *fused[3:]]
        assert ["rerank" in r["score_breakdown"] for r in response.json()["results"]] == [
            True, True, True, False, False
        ]  # fmt: skip

    def test_it_calls_the_reranker_outside_the_transaction(self) -> None:
        outside = len(connection.atomic_blocks)  # this test case's own
        self.search(rerank=True)
        assert self.fake.requests[-1]["atomic_depth"] == outside

    def test_it_runs_the_same_queries_as_without_rerank(self) -> None:
        self.search()  # the key's last use, noted once a minute
        with CaptureQueriesContext(connection) as plain:
            self.search()
        with CaptureQueriesContext(connection) as reranked:
            self.search(rerank=True)

        # The same, and after them one statement (in a transaction of its own) counting it.
        def statements(captured: CaptureQueriesContext) -> list[str]:
            # Without the values and savepoint names that differ from one request to the next.
            return [re.sub(r"'[^']*'|\"s\d+_x\d+\"|\d+", "?", q["sql"]) for q in captured]

        before, after = statements(plain), statements(reranked)
        assert after[: len(before)] == before
        extra = after[len(before) :]
        [counted] = [q for q in extra if "memory_rerankusageday" in q]
        assert "ON CONFLICT" in counted
        # The rest is its transaction and tenant: no other table is read or written.
        assert all(q.startswith(("SAVEPOINT", "RELEASE", "SELECT set_config")) for q in extra
                   if q is not counted), extra  # fmt: skip

    def test_it_counts_the_days_usage_in_the_project(self) -> None:
        self.search(rerank=True)
        self.search(rerank=True)
        # Two searches, both reranked, one call each; the service's tokens (36 words each).
        assert self.usage() == [(2, 2, 2, 72, 0)]
        assert self.usage(self.charlie.key.project_id) == []  # row-level security: not theirs
        self.search()  # rerank not asked: nothing counted
        assert self.usage() == [(2, 2, 2, 72, 0)]

    def test_it_counts_each_call(self) -> None:
        with self.assertLogs("memory.rerank", "INFO") as logs:
            self.search(rerank=True)
        record: Any = logs.records[0]
        # The service's own count (the fake's: the documents' words).
        assert (record.calls, record.input_tokens, record.outcome) == (1, 36, "reranked")

    def test_it_leaves_the_answer_alone_when_rerank_is_not_asked(self) -> None:
        response = self.search()
        assert "reranked" not in response.json()
        assert response.headers["Engram-Reranked"] == "false"
        assert self.fake.requests == []

    def test_it_says_so_on_a_bare_list_too(self) -> None:
        response = self.call("post", "/v1/memories/search/", {**ALL, "rerank": True})
        assert isinstance(response.json(), list)
        assert response.headers["Engram-Reranked"] == "true"


class FallbackTestCase(_Search):
    """A reranker that fails in any way: the fused order, said so, never an error."""

    @pytest.fixture(autouse=True)
    def _reranker(self, fake_rerank: FakeReranker, settings: Any) -> None:
        self.fake = fake_rerank
        settings.ENGRAM_RERANK = "endpoint"
        settings.ENGRAM_RERANK_URL = fake_rerank.url
        settings.ENGRAM_RERANK_TIMEOUT_MS = 300
        self.settings_ = settings

    def assert_fused_order(self, mode: str, delay: float = 0.0) -> None:
        fused = self.search(top_k=3).json()["results"]
        self.fake.mode, self.fake.delay = mode, delay
        with self.assertLogs("memory.rerank", "WARNING"):
            response = self.search(rerank=True, top_k=3)
        assert response.status_code == 200
        assert response.json()["results"] == fused
        assert response.json()["reranked"] is False
        assert response.headers["Engram-Reranked"] == "false"

    def test_it_gives_the_fused_order_past_the_deadline(self) -> None:
        self.assert_fused_order("slow", delay=1.0)

    def test_it_gives_the_fused_order_on_a_5xx(self) -> None:
        self.assert_fused_order("error")
        # Counted all the same: a search the reranker was asked for, one call, not reranked.
        assert self.usage() == [(1, 0, 1, 0, 0)]

    def test_it_gives_the_fused_order_on_malformed_json(self) -> None:
        self.assert_fused_order("malformed")

    def test_it_gives_the_fused_order_on_an_index_out_of_range(self) -> None:
        self.assert_fused_order("out_of_range")

    def test_it_gives_the_fused_order_on_an_index_twice(self) -> None:
        self.assert_fused_order("duplicate")

    def test_it_gives_the_fused_order_when_the_reranker_is_down(self) -> None:
        self.settings_.ENGRAM_RERANK_URL = "http://127.0.0.1:9"  # nothing listens there
        self.assert_fused_order("reversed")

    def test_it_answers_within_the_deadline(self) -> None:
        self.fake.mode, self.fake.delay = "slow", 5.0
        with self.assertLogs("memory.rerank", "WARNING") as logs:
            self.search(rerank=True)
        record: Any = logs.records[0]
        assert record.ms < 1000


class NoRerankerTestCase(_Search):
    def test_it_keeps_the_fused_order_and_says_it_was_not_reranked(self) -> None:
        fused = self.search(top_k=2).json()["results"]
        response = self.search(rerank=True, top_k=2)
        assert response.json()["results"] == fused
        assert response.json()["reranked"] is False
        assert response.headers["Engram-Reranked"] == "false"
        assert self.usage() == []  # no reranker was called


class JudgeTestCase(_Search):
    """The extraction model reorders: Claude, then an OpenAI-compatible model."""

    @pytest.fixture(autouse=True)
    def _judge(self, fake_claude: FakeClaude, settings: Any) -> None:
        self.fake = fake_claude
        settings.ENGRAM_RERANK = "judge"
        settings.ENGRAM_EXTRACTOR = "claude"
        settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL = "sk-test", fake_claude.url
        settings.ENGRAM_RERANK_TIMEOUT_MS = 1000
        self.settings_ = settings

    def use_openai(self) -> None:
        self.settings_.ENGRAM_EXTRACTOR = "openai"
        self.settings_.ENGRAM_OPENAI_BASE_URL = f"{self.fake.url}/v1"
        self.settings_.ENGRAM_OPENAI_API_KEY = "sk-local"
        self.settings_.ENGRAM_LLM_MODEL = "local-model"

    def test_it_reorders_by_the_judges_ranking(self) -> None:
        fused = self.fused()
        self.fake.script(Reply(respond=reversed_ranking))
        response = self.search(rerank=True)
        assert self.texts(response) == fused[::-1]
        assert response.json()["reranked"] is True
        assert self.fake.requests[-1]["tool"] == "record_ranking"

    def test_it_never_drops_a_candidate(self) -> None:
        fused = self.fused()
        # Two ranked, one invented, one repeated: the rest follow in the fused order.
        ranking = [{"id": 3, "relevance": 0.9}, {"id": 99, "relevance": 0.8},
                   {"id": 3, "relevance": 0.7}, {"id": 1, "relevance": 0.5}]  # fmt: skip
        self.fake.script(Reply({"ranking": ranking}))
        results = self.search(rerank=True).json()["results"]
        assert [r["memory"] for r in results] == [fused[i] for i in (3, 1, 0, 2, 4)]
        assert [r["score_breakdown"].get("rerank") for r in results] == [0.9, 0.5, None, None, None]

    def test_it_counts_the_judges_tokens(self) -> None:
        self.fake.script(Reply(respond=reversed_ranking, usage=(300, 45)))
        with self.assertLogs("memory.rerank", "INFO") as logs:
            self.search(rerank=True)
        record: Any = logs.records[0]
        assert (record.calls, record.input_tokens, record.output_tokens) == (1, 300, 45)
        assert self.usage() == [(1, 1, 1, 300, 45)]

    def test_it_gives_the_fused_order_when_the_judge_fails(self) -> None:
        fused = self.fused()
        for reply in (Reply(status=500), Reply(stop_reason="refusal"), Reply({"ranking": []})):
            self.fake.script(reply)
            with self.assertLogs("memory.rerank", "WARNING"):
                response = self.search(rerank=True)
            assert (self.texts(response), response.json()["reranked"]) == (fused, False)
        assert len(self.fake.requests) == 3  # no retry: the deadline is the search's

    def test_it_gives_the_fused_order_past_the_deadline(self) -> None:
        self.settings_.ENGRAM_RERANK_TIMEOUT_MS = 200
        fused = self.fused()
        self.fake.script(Reply(respond=reversed_ranking, delay=1.0))
        with self.assertLogs("memory.rerank", "WARNING"):
            response = self.search(rerank=True)
        assert (self.texts(response), response.json()["reranked"]) == (fused, False)

    def test_an_openai_compatible_model_judges_too(self) -> None:
        self.use_openai()
        fused = self.fused()
        self.fake.script(Reply(respond=reversed_ranking))
        response = self.search(rerank=True)
        assert self.fake.requests[-1]["path"] == "/v1/chat/completions"
        assert self.texts(response) == fused[::-1]

    def test_an_openai_compatible_model_past_the_deadline(self) -> None:
        self.use_openai()
        self.settings_.ENGRAM_RERANK_TIMEOUT_MS = 200
        fused = self.fused()
        self.fake.script(Reply(respond=reversed_ranking, delay=1.0))
        with self.assertLogs("memory.rerank", "WARNING"):
            response = self.search(rerank=True)
        assert (self.texts(response), response.json()["reranked"]) == (fused, False)


def reversed_ranking(body: dict[str, Any]) -> dict[str, Any]:
    """The judge's answer: the candidates the prompt shows, the last first."""
    prompt = next(m for m in body["messages"] if m["role"] == "user")["content"]
    prompt = prompt if isinstance(prompt, str) else prompt[0]["text"]
    ids = [int(i) for i in re.findall(r"^id (\d+):", prompt, re.MULTILINE)]
    return {"ranking": [{"id": i, "relevance": (i + 1) / len(ids)} for i in reversed(ids)]}


@pytest.mark.usefixtures("committed_db")
def test_no_transaction_is_open_during_the_call(fake_rerank: FakeReranker, settings: Any) -> None:
    settings.ENGRAM_RERANK, settings.ENGRAM_RERANK_URL = "endpoint", fake_rerank.url
    fake_rerank.watch = connections["default"]
    acme: NewApiKey = make_key("acme", "main")
    with project_context(acme.key.project_id):
        add_texts(acme.key.project, FACTS, user_id="alice")
    response = Client().post(
        "/v3/memories/search/", {**ALL, "rerank": True},
        content_type="application/json", headers=auth(acme.raw),
    )  # fmt: skip
    assert response.json()["reranked"] is True
    assert fake_rerank.requests[-1]["in_atomic_block"] is False


@pytest.mark.usefixtures("committed_db")
def test_the_count_commits_on_its_own_without_waiting_for_the_disk() -> None:
    """Outside any transaction the count is its own, asynchronous commit; inside a caller's it
    leaves that transaction's commit alone."""
    acme: NewApiKey = make_key("acme", "main")
    project = acme.key.project_id
    with CaptureQueriesContext(connection) as alone:
        do_count_rerank(project, reranked=True, calls=1, input_tokens=30, output_tokens=0)
    assert "SET LOCAL synchronous_commit TO OFF" in [q["sql"] for q in alone]
    with project_context(project), CaptureQueriesContext(connection) as nested:
        do_count_rerank(project, reranked=False, calls=1, input_tokens=0, output_tokens=0)
        setting = connection.cursor()
        setting.execute("SHOW synchronous_commit")
        assert setting.fetchone() == ("on",)
    assert not any("synchronous_commit TO" in q["sql"] for q in nested)
    with project_context(project):
        counted = RerankUsageDay.objects.values_list("searches", "reranked", "input_tokens")
        assert list(counted) == [(2, 1, 30)]


# -- reading a reranker's reply -------------------------------------------------------------


def test_a_permutation_puts_what_was_left_out_after_in_order() -> None:
    assert permutation([3, 7, 3, -1, 1], 5) == [3, 1, 0, 2, 4]


def test_both_reply_shapes_read_the_same() -> None:
    cohere = {
        "results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.2}]
    }
    tei = [{"index": 0, "score": 0.2}, {"index": 1, "score": 0.9}]
    assert endpoint_ranking(cohere, 2) == endpoint_ranking(tei, 2) == [(1, 0.9), (0, 0.2)]


@pytest.mark.parametrize(
    "reply",
    [{}, [{"index": True, "score": 1}], [{"index": 0, "score": "high"}], [{"index": 0}],
     [{"index": 0, "score": float("nan")}], "[]", None],
)  # fmt: skip
def test_a_reply_that_cannot_be_read_is_refused(reply: Any) -> None:
    with pytest.raises(RerankError):
        endpoint_ranking(reply, 2)


def test_the_judges_relevance_is_clamped() -> None:
    data = {"ranking": [{"id": 0, "relevance": 7}, {"id": 1, "relevance": "?"}, "x"]}
    assert judge_ranking(data, 2) == [(0, 1.0), (1, 0.0)]


def test_the_relations_follow_the_hits_kept() -> None:
    hits = [SimpleNamespace(memory=SimpleNamespace(id=uuid.uuid4())) for _ in range(3)]
    a, b, c = (str(h.memory.id) for h in hits)
    of = {name: relation(n, ids) for n, (name, ids) in enumerate(
        {"a": [a], "b": [b], "c": [c], "bc": [c, b], "query's": [str(uuid.uuid4())]}.items()
    )}  # fmt: skip
    found = Found(hits, relations=list(of.values()), top_k=2)  # type: ignore[arg-type]
    kept = [hits[2], hits[1]]  # reranked: c, then b; a cut
    assert _kept(found, kept) == [of["c"], of["bc"], of["b"], of["query's"]]  # type: ignore[arg-type]


def relation(id: int, memory_ids: list[str]) -> Relation:
    return Relation(id, "alice", "knows", "bob", True, "", None, memory_ids, None, {}, 1, 2)
