"""Search scores are calibrated: a score depends on the memory's own signals and how far the
query's closest memory stands out, not on a rescaling of the result list, so scores compare
across queries and the threshold means something. Pure functions (memory.retrieval.scoring)
and, through the API with the real embedder, what the default threshold keeps and drops."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pytest import approx

from memory.retrieval.scoring import (
    ANSWER_GAP_WEIGHT,
    ANSWER_MARGIN,
    BACKGROUND,
    DISTINCTIVE_POOL,
    DISTINCTIVE_WEIGHT,
    EVENT_PRIOR,
    KEYWORD_HALF,
    KEYWORD_WEIGHT,
    SCORE_MIDPOINT,
    SEMANTIC_WEIGHT,
    Signals,
    answer_gap,
    bounded_keyword,
    calibrated,
    distinctiveness,
    fuse,
)
from memory.search import DEFAULT_THRESHOLD
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth
from tests.memory.test_api_search import FACTS
from tests.memory.test_own_names import DANA


def test_bounded_keyword_maps_a_rank_into_zero_one() -> None:
    assert bounded_keyword(0.0) == 0.0
    assert bounded_keyword(KEYWORD_HALF) == 0.5
    ranks = [0.01, 0.06, 0.3, 0.9, 5.0, 1e6]
    bounded = [bounded_keyword(r) for r in ranks]
    assert bounded == sorted(bounded) and all(0 < b < 1 for b in bounded)


def test_the_relevance_is_the_weighted_mean_of_its_own_signals() -> None:
    alone = Signals(0.6, 0.3)
    (score,) = fuse([alone])
    expected = (SEMANTIC_WEIGHT * 0.6 + KEYWORD_WEIGHT * bounded_keyword(0.3)) / (
        SEMANTIC_WEIGHT + KEYWORD_WEIGHT
    )
    assert score.relevance == expected / (1 + EVENT_PRIOR)  # no group: no prior share
    assert (score.semantic, score.bm25, score.entity) == (0.6, bounded_keyword(0.3), 0.0)
    assert score.score == calibrated(score.relevance, score.distinctiveness)


def test_the_score_calibrates_relevance_and_distinctiveness() -> None:
    assert calibrated(SCORE_MIDPOINT, 0.0) == 0.5
    assert calibrated(SCORE_MIDPOINT - DISTINCTIVE_WEIGHT * 0.1, 0.1) == 0.5
    grid = [calibrated(r / 10, d / 10) for r in range(11) for d in range(6)]
    assert all(0 < g < 1 for g in grid)
    assert calibrated(0.3, 0.1) > calibrated(0.2, 0.1)
    assert calibrated(0.2, 0.2) > calibrated(0.2, 0.1)


def test_distinctiveness_is_how_far_the_closest_stands_out() -> None:
    pool = [0.6, 0.2, 0.3, 0.1, *[0.25] * (DISTINCTIVE_POOL - 4)]
    assert distinctiveness(pool) == 0.6 - sum(pool[1:]) / (DISTINCTIVE_POOL - 1)
    # A small scope's missing candidates count at the background; a negative cosine as 0.
    assert distinctiveness([0.4, -0.3]) == 0.4 - (0 + BACKGROUND * 28) / 29
    assert distinctiveness([]) == 0.0
    # Only the closest DISTINCTIVE_POOL count: far ones do not pull the background down.
    pool = [0.5] + [0.3] * (DISTINCTIVE_POOL - 1)
    assert distinctiveness(pool + [-0.5] * 50) == distinctiveness(pool)


def test_a_weak_best_scores_low_and_a_standout_high() -> None:
    """No rescaling of the list: a weak best stays weak, whatever the others."""
    weak = [Signals(0.12, 0.0), Signals(0.05, 0.0), Signals(-0.2, 0.0)]
    scores = [s.score for s in fuse(weak)]
    assert max(scores) < 0.5
    assert scores[0] > scores[1] > scores[2]
    # A memory that stands out from the scope's others is kept, and so are the others: the
    # question is about something the scope holds (the list is then cut by top_k).
    crowd = [Signals(0.2, 0.0) for _ in range(10)]
    standout = fuse([Signals(0.7, 1.0), *crowd])
    assert standout[0].score > standout[1].score > 0.5


def test_the_order_is_the_relevances() -> None:
    """Within a query every score is one increasing function of the relevance (the same
    distinctiveness for all), so the list ranks as the fused signals do."""
    candidates = [Signals(0.6, 0.4), Signals(0.55, 0.35), Signals(0.3, 0.0), Signals(0.5, 0.0)]
    scores = fuse(candidates)
    assert len({s.distinctiveness for s in scores}) == 1
    by_score = sorted(range(4), key=lambda i: -scores[i].score)
    assert by_score == sorted(range(4), key=lambda i: -scores[i].relevance)


def test_a_strong_hit_lends_its_conversation_a_share() -> None:
    strong, weak = Signals(0.8, 0.6, group="c1"), Signals(0.2, 0.0, group="c1")
    stranger = Signals(0.2, 0.0, group="c2")
    scores = fuse([strong, weak, stranger])
    assert scores[0].score > scores[1].score > scores[2].score


@given(
    st.lists(
        st.tuples(
            st.floats(-1, 1),
            st.floats(0, 1e9),
            st.sampled_from([None, "a", "b"]),
            st.lists(st.sampled_from(["x", "y"]), max_size=2),
        ),
        min_size=1,
        max_size=30,
    ),
    st.floats(0, 10),
)
def test_scores_stay_in_zero_one(raw: list[Any], entity_weight: float) -> None:
    candidates = [Signals(s, k, group, tuple(e)) for s, k, group, e in raw]
    for score in fuse(candidates, entity_weight=entity_weight):
        assert 0.0 <= score.score <= 1.0
        assert 0.0 <= score.semantic <= 1.0 and 0.0 <= score.bm25 < 1.0
        assert 0.0 <= score.entity <= 1.0


class ComparableScoresTestCase(BaseTestCase):
    def test_an_unrelated_querys_best_score_stays_below_a_related_ones(self) -> None:
        with project_context(self.alice.key.project_id):
            add_texts(self.alice.key.project, FACTS, user_id="alice")

        def best(query: str) -> float:
            response = self.client.post(
                "/v3/memories/search/",
                {"query": query, "filters": {"user_id": "alice"}, "threshold": 0},
                content_type="application/json",
                headers=auth(self.alice.raw),
            )
            assert response.status_code == 200, response.content
            results = response.json()["results"]
            assert results, query
            return float(results[0]["score"])

        related = [best(q) for q in ("Where does Maria live?", "is she allergic to peanuts")]
        unrelated = [
            best(q)
            for q in ("quarterly tax filing deadlines", "the boiling point of liquid nitrogen")
        ]
        assert min(related) >= DEFAULT_THRESHOLD > max(unrelated), (related, unrelated)


def test_the_answer_gap_is_how_far_the_closest_falls_short_of_a_direct_answer() -> None:
    # No reference (a hosted model that failed): no gap.
    assert answer_gap([0.5, 0.2], None) == 0.0
    # Within the margin of the closest reference fact: no gap; beyond it, the shortfall.
    assert answer_gap([0.5, 0.2], 0.7) == 0.0
    assert answer_gap([0.3, -0.2], 0.8) == approx(0.3 - 0.8 + ANSWER_MARGIN)
    assert answer_gap([], 0.8) == approx(-0.8 + ANSWER_MARGIN)
    # The gap lowers every score alike: the order stays the relevance's.
    candidates = [Signals(0.3, 0.4), Signals(0.25, 0.0), Signals(0.1, 0.2)]
    plain, gapped = fuse(candidates), fuse(candidates, typical=0.9)
    assert [s.answer_gap for s in gapped] == approx([0.3 - 0.9 + ANSWER_MARGIN] * 3)
    assert [s.relevance for s in plain] == [s.relevance for s in gapped]
    assert all(g.score < p.score for p, g in zip(plain, gapped, strict=True))
    assert gapped[0].score == calibrated(
        gapped[0].relevance, gapped[0].distinctiveness, gapped[0].answer_gap
    )
    assert calibrated(0.3, 0.1, -0.1) == calibrated(0.3 - ANSWER_GAP_WEIGHT * 0.1, 0.1)


class AnswerGapTestCase(BaseTestCase):
    """Through the API with the real embedder and the reference facts: a question about
    something the scope never mentions comes back empty because of its answer gap, while the
    questions it answers keep their answers."""

    def search(self, query: str, **extra: Any) -> list[dict[str, Any]]:
        body = {"query": query, "filters": {"user_id": "dana"}, **extra}
        response = self.call("post", "/v3/memories/search/", body)
        assert response.status_code == 200, response.content
        return list(response.json()["results"])

    def test_a_question_about_what_the_scope_never_mentions_returns_nothing(self) -> None:
        with project_context(self.alice.key.project_id):
            add_texts(self.alice.key.project, DANA, user_id="dana")
        # "play" matches the cello: without the gap, the default threshold returned it.
        assert self.search("Does Dana play chess?") == []
        best = self.search("Does Dana play chess?", threshold=0)[0]
        breakdown = best["score_breakdown"]
        assert breakdown["answer_gap"] < 0
        without = calibrated(breakdown["relevance"], breakdown["distinctiveness"])
        assert without >= DEFAULT_THRESHOLD > best["score"]
        for question, fact in [
            ("What instrument does Dana play?", DANA[2]),
            ("Where does Dana live?", DANA[1]),
            ("Is Dana allergic to anything?", DANA[6]),
        ]:
            found = self.search(question)
            assert found and found[0]["memory"] == fact, question
            assert found[0]["score_breakdown"]["answer_gap"] == 0, question
