"""Search scores are calibrated: a score depends on the memory's own features and how far the
query's closest memory stands out, not on a rescaling of the result list, so scores compare
across queries and the threshold means something. The features and the fitted ranker's
arithmetic (memory.retrieval.scoring, pure functions), the served ranker file, and, through
the API with the real embedder, what the default threshold keeps and drops."""

from __future__ import annotations

import json
import math
from typing import Any
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st
from pytest import approx

from memory.retrieval.scoring import (
    ANSWER_MARGIN,
    BACKGROUND,
    CALIBRATION,
    CONFIRM_WORDS,
    DEFAULT_RANKER,
    DISTINCTIVE_POOL,
    FEATURES,
    KEYWORD_CONFIRM,
    KEYWORD_HALF,
    LONG_WORDS,
    Ranker,
    Signals,
    answer_gap,
    around,
    bounded_keyword,
    confirmed,
    distinctiveness,
    features,
    fuse,
    longness,
    ranker_file,
    ranker_for,
)
from memory.retrieval.search import WORDS_COUNTED
from memory.search import DEFAULT_THRESHOLD
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth
from tests.memory.test_api_search import FACTS
from tests.memory.test_own_names import DANA

SERVED = ranker_for(DEFAULT_RANKER)
# A ranker with round weights, for the arithmetic.
ROUND = Ranker("test@0", (2.0, 1.0, 1.0, 0.5, 0.25, 0.5, 0.5, -1.0), (4.0, 3.0, 10.0), -1.0)


def feature(row: tuple[float, ...], name: str) -> float:
    return row[FEATURES.index(name)]


def test_bounded_keyword_maps_a_rank_into_zero_one() -> None:
    assert bounded_keyword(0.0) == 0.0
    assert bounded_keyword(KEYWORD_HALF) == 0.5
    ranks = [0.01, 0.06, 0.3, 0.9, 5.0, 1e6]
    bounded = [bounded_keyword(r) for r in ranks]
    assert bounded == sorted(bounded) and all(0 < b < 1 for b in bounded)


def test_the_served_ranker_is_the_fitted_file_named_in_every_score() -> None:
    text = ranker_file(DEFAULT_RANKER).read_text()
    data = json.loads(text)
    assert data["model"] == DEFAULT_RANKER
    assert (tuple(data["features"]), tuple(data["calibration"])) == (FEATURES, CALIBRATION)
    assert SERVED.ranker == tuple(data["ranker"]) and SERVED.intercept == data["intercept"]
    assert "support" not in data["fitted_on"]  # the held-out set is in no fit
    # It rises with the relevance and with how far the closest stands out, and falls with the
    # answer gap (a negative gap lowers the score).
    assert SERVED.calibrator[0] > 0 and SERVED.calibrator[1] > 0 and SERVED.calibrator[2] > 0
    (score,) = fuse([Signals(0.5, 0.2)], SERVED)
    assert score.ranker == SERVED.name and SERVED.name.startswith(DEFAULT_RANKER + "@")
    # A model with no file of its own is scored with the bundled model's, and says so.
    assert ranker_for("openai-compatible:text-embedding-3-small") == SERVED


def test_a_file_fitted_on_other_features_is_refused() -> None:
    data = json.loads(ranker_file(DEFAULT_RANKER).read_text())
    data["features"] = [*data["features"], "length"]
    try:
        Ranker.from_json(json.dumps(data), "local:x")
    except ValueError as exc:
        assert "fit it again" in str(exc)
    else:
        raise AssertionError("a file of other features was read")


def test_a_process_whose_ranker_cannot_be_used_refuses_to_start(tmp_path: Any) -> None:
    """The start-up check (memory.E002): a file of other features, or no file at all, is an
    error naming the fix, before any search fails on it."""
    from memory import checks, retrieval

    assert checks.ranker_can_be_read() == []  # the bundled file serves
    data = json.loads(ranker_file(DEFAULT_RANKER).read_text())
    data["features"] = [*data["features"], "length"]
    (tmp_path / ranker_file(DEFAULT_RANKER).name).write_text(json.dumps(data))
    for folder in (tmp_path, tmp_path / "missing"):
        retrieval.scoring.ranker_for.cache_clear()
        try:
            with patch.object(retrieval.scoring, "RANKERS", folder):
                [error] = checks.ranker_can_be_read()
        finally:
            retrieval.scoring.ranker_for.cache_clear()
        assert error.id == "memory.E002" and "fit_ranker.py" in (error.hint or "")
    assert checks.ranker_can_be_read() == []


def test_the_score_is_the_calibrated_weighted_sum_of_the_features() -> None:
    alone = Signals(0.6, 0.3, words=LONG_WORDS)
    (row,) = features([alone])
    assert feature(row, "semantic") == 0.6
    assert feature(row, "keyword") == bounded_keyword(0.3)  # a cosine of 0.6 confirms it
    assert feature(row, "keyword_long") == bounded_keyword(0.3)  # long: longness 1
    assert feature(row, "conversation_semantic") == 0.0  # no conversation
    (score,) = fuse([alone], ROUND, typical=0.5)
    relevance = 2 * 0.6 + 1 * bounded_keyword(0.3) + 1 * bounded_keyword(0.3)
    assert score.relevance == approx(relevance)
    distinct = distinctiveness([0.6])
    assert score.distinctiveness == approx(distinct)
    assert score.answer_gap == 0.0
    logit = 4 * relevance + 3 * distinct + 10 * 0.0 - 1
    assert score.score == approx(1 / (1 + math.exp(-logit)))
    assert (score.semantic, score.bm25, score.entity, score.ranker) == (
        0.6, bounded_keyword(0.3), 0.0, "test@0",
    )  # fmt: skip


def test_a_short_memorys_keyword_has_no_long_share() -> None:
    assert longness(0) == longness(CONFIRM_WORDS) == 0.0
    assert longness(LONG_WORDS) == longness(10 * LONG_WORDS) == 1.0
    middle = (CONFIRM_WORDS + LONG_WORDS) // 2
    assert longness(middle) == approx((middle - CONFIRM_WORDS) / (LONG_WORDS - CONFIRM_WORDS))
    short, long = features([Signals(0.6, 0.3, words=8), Signals(0.6, 0.3, words=LONG_WORDS)])
    assert feature(short, "keyword") == feature(long, "keyword")
    assert feature(short, "keyword_long") == 0.0 < feature(long, "keyword_long")
    # With the served fit, a long memory's keyword counts more (the fit says by how much).
    assert SERVED.ranker[FEATURES.index("keyword_long")] > 0


def test_a_keyword_match_counts_as_far_as_the_meaning_confirms_it() -> None:
    assert confirmed(0.5, KEYWORD_CONFIRM) == confirmed(0.5, 0.9) == 0.5
    assert confirmed(0.5, KEYWORD_CONFIRM / 2) == approx(0.25)
    assert confirmed(0.5, -0.3) == confirmed(0.0, 0.9) == 0.0
    # A long memory's cosine with any one question is diluted: its bar is lower in proportion.
    assert confirmed(0.5, KEYWORD_CONFIRM / 2, words=CONFIRM_WORDS) == approx(0.25)
    assert confirmed(0.5, KEYWORD_CONFIRM / 2, words=2 * CONFIRM_WORDS) == 0.5
    assert confirmed(0.5, KEYWORD_CONFIRM / 4, words=2 * CONFIRM_WORDS) == approx(0.25)
    chance, meant = features([Signals(0.05, 1.0), Signals(KEYWORD_CONFIRM, 1.0)])
    assert feature(meant, "keyword") == bounded_keyword(1.0)
    assert feature(chance, "keyword") == approx(bounded_keyword(1.0) * 0.05 / KEYWORD_CONFIRM)


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
    scores = [s.score for s in fuse(weak, SERVED)]
    assert max(scores) < 0.5
    assert scores[0] > scores[1] > scores[2]
    # A memory that stands out from the scope's others is kept, above them. (The others of a
    # query with a standout may pass too: the query is about something the scope holds, and
    # which of them is cut is `top_k`'s, as the calibrator learnt from the labelled sets.)
    crowd = [Signals(0.2, 0.0) for _ in range(10)]
    standout = fuse([Signals(0.7, 1.0), *crowd], SERVED)
    assert standout[0].score > 0.5
    assert standout[0].score > standout[1].score


def test_the_order_is_the_relevances() -> None:
    """Within a query every score is one increasing function of the relevance (the same
    query features for all), so the list ranks as the ranker does."""
    candidates = [Signals(0.6, 0.4), Signals(0.55, 0.35), Signals(0.3, 0.0), Signals(0.5, 0.0)]
    scores = fuse(candidates, SERVED)
    assert len({(s.distinctiveness, s.answer_gap) for s in scores}) == 1
    by_score = sorted(range(4), key=lambda i: -scores[i].score)
    assert by_score == sorted(range(4), key=lambda i: -scores[i].relevance)


def test_the_others_of_a_conversation_lend_it_their_best() -> None:
    pair = [Signals(0, 0, "a"), Signals(0, 0, "a"), Signals(0, 0, None)]
    assert around(pair, [0.8, 0.2, 0.9]) == [0.2, 0.8, 0.0]
    strong, weak = Signals(0.8, 0.6, group="c1"), Signals(0.2, 0.0, group="c1")
    stranger = Signals(0.2, 0.0, group="c2")
    scores = fuse([strong, weak, stranger], SERVED)
    assert scores[0].score > scores[1].score > scores[2].score


def test_out_of_the_window_counts_only_when_some_are_in_it() -> None:
    inside, outside = Signals(0.4, 0.0, in_window=True), Signals(0.4, 0.0, in_window=False)
    rows = features([inside, outside])
    assert [feature(r, "out_of_window") for r in rows] == [0.0, 1.0]
    rows = features([Signals(0.4, 0.0, in_window=False), outside])
    assert [feature(r, "out_of_window") for r in rows] == [0.0, 0.0]  # the window is loose
    a, b = fuse([inside, outside], SERVED)
    assert a.score > b.score and (a.temporal, b.temporal) == (1.0, 0.0)


def test_names_the_query_says_and_names_matched_by_meaning_are_two_features() -> None:
    named, similar = Signals(0.3, 0, entities=("rome",)), Signals(0.3, 0, entities=("italy",))
    none = Signals(0.3, 0)
    rows = features([named, similar, none], names=frozenset({"rome"}))
    assert [feature(r, "entity") for r in rows] == [approx(1.0), 0.0, 0.0]
    assert [feature(r, "entity_similar") for r in rows] == [0.0, approx(1.0), 0.0]


@given(
    st.lists(
        st.tuples(
            st.floats(-1, 1),
            st.floats(0, 1e9),
            st.sampled_from([None, "a", "b"]),
            st.lists(st.sampled_from(["x", "y"]), max_size=2),
            st.sampled_from([None, True, False]),
            st.integers(0, 10_000),
        ),
        min_size=1,
        max_size=30,
    ),
    st.one_of(st.none(), st.floats(-1, 1)),
)
def test_scores_stay_in_zero_one(raw: list[Any], typical: float | None) -> None:
    candidates = [Signals(s, k, group, tuple(e), w, n) for s, k, group, e, w, n in raw]
    for score in fuse(candidates, SERVED, names=frozenset({"x"}), typical=typical):
        assert 0.0 <= score.score <= 1.0
        assert 0.0 <= score.semantic <= 1.0 and 0.0 <= score.bm25 < 1.0
        assert 0.0 <= score.entity <= 2.0 and math.isfinite(score.relevance)


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
    plain, gapped = fuse(candidates, SERVED), fuse(candidates, SERVED, typical=0.9)
    assert [s.answer_gap for s in gapped] == approx([0.3 - 0.9 + ANSWER_MARGIN] * 3)
    assert [s.relevance for s in plain] == [s.relevance for s in gapped]
    assert all(g.score < p.score for p, g in zip(plain, gapped, strict=True))


# More of Dana's facts, none about games, so that her scope is not a handful.
DANA_MORE = [
    "I take my coffee black with no sugar.",
    "I'm trying to learn Portuguese; my lessons are on Tuesday evenings.",
    "East of Eden is my favourite book.",
    "I run along the beach most mornings before my shift.",
    "My husband Tomás is a structural engineer.",
    "I'm putting money aside to buy an apartment of my own.",
    "Our wedding anniversary is October 3rd.",
    "I've been to Japan twice and would love to go back.",
]


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
            for fact in [*DANA, *DANA_MORE]:  # one add each, as an assistant stores facts
                add_texts(self.alice.key.project, [fact], user_id="dana")
        # "play" matches the cello: without the gap, the default threshold returned it.
        assert self.search("Does Dana play chess?") == []
        best = self.search("Does Dana play chess?", threshold=0)[0]
        breakdown = best["score_breakdown"]
        assert breakdown["answer_gap"] < 0
        logit = (
            SERVED.calibrator[0] * breakdown["relevance"]
            + SERVED.calibrator[1] * breakdown["distinctiveness"]
            + SERVED.intercept
        )
        without = 1 / (1 + math.exp(-logit))  # the same score without the gap
        assert without >= DEFAULT_THRESHOLD > best["score"]
        for question, fact in [
            ("What instrument does Dana play?", DANA[2]),
            ("Where does Dana live?", DANA[1]),
            ("Is Dana allergic to anything?", DANA[6]),
        ]:
            found = self.search(question)
            assert found and found[0]["memory"] == fact, question
            assert found[0]["score_breakdown"]["answer_gap"] == 0, question


# A user whose question words turn up, by chance, in facts that do not answer them.
SAM = [
    "My name is Sam.",
    "I drive to the office in an old Fiat.",
    "I turned 45 last March.",
    "My brother Tom lives in Berlin and drives a taxi there.",
    "I lived in Leeds until 2012.",
    "These days I design bridge foundations as a structural engineer.",
    "On Sundays I bake sourdough for the whole street.",
]
# A long message with a fact in passing, and short ones closer in meaning to the question.
LONG = (
    "I'm looking for some tips on social media advertising for the bakery, since the spring "
    "orders have been slow and I want to try something new before the summer markets start. I "
    "was thinking of short videos of the ovens in the morning, or a loyalty card, but I have no "
    "idea what works for a small shop like mine. My sister thinks I should try a stall at the "
    "Saturday market first, and my accountant wants me to cut costs instead. Oh, and the kiln at "
    "the pottery studio was finally sorted out last Tuesday, so that's one less thing to worry "
    "about."
)
CHORES = [
    "The boiler was serviced in October.",
    "I fixed the garden fence on Sunday.",
    "The oven door at home doesn't close properly.",
    "The washing machine broke down again yesterday.",
]


class ConfirmedKeywordTestCase(BaseTestCase):
    """Through the API with the real embedder: a question word a fact shares by chance does not
    outrank the fact that answers the question, and a fact in passing in a long message keeps
    its keyword."""

    def search(self, user: str, query: str) -> list[str]:
        body = {"query": query, "filters": {"user_id": user}, "threshold": 0}
        response = self.call("post", "/v3/memories/search/", body)
        assert response.status_code == 200, response.content
        return [r["memory"] for r in response.json()["results"]]

    def test_a_word_shared_by_chance_does_not_outrank_the_answer(self) -> None:
        with project_context(self.alice.key.project_id):
            for fact in SAM:  # one add each, as an assistant stores facts
                add_texts(self.alice.key.project, [fact], user_id="sam")
        for question, answer in [
            ("How old is Sam?", SAM[2]),  # not the old Fiat
            ("What does Sam do for a living?", SAM[5]),  # not where he or his brother lived
        ]:
            assert self.search("sam", question)[0] == answer, question

    def test_the_search_weighs_each_memorys_keyword_by_its_own_length(self) -> None:
        with project_context(self.alice.key.project_id):
            for text in [*CHORES, LONG]:
                add_texts(self.alice.key.project, [text], user_id="baker")
        with patch("memory.retrieval.search.fuse", wraps=fuse) as fusion:
            found = self.search("baker", "What happened with the kiln?")
        assert sorted(found) == sorted([*CHORES, LONG])
        candidates = fusion.call_args.args[0]
        assert sorted(c.words for c in candidates) == sorted(len(t.split()) for t in found)
        # The long message's cosine (0.13) is below KEYWORD_CONFIRM, but its length lowers the
        # bar: its match on "kiln" counts in full.
        (long,) = [c for c in candidates if c.words > CONFIRM_WORDS]
        assert long.keyword > 0 and long.semantic < KEYWORD_CONFIRM
        assert confirmed(0.5, long.semantic, long.words) == 0.5

    def test_a_very_long_memorys_words_are_counted_over_its_start(self) -> None:
        huge = "By the way, the kiln works again. " + "More news from the bakery. " * 600
        with project_context(self.alice.key.project_id):
            add_texts(self.alice.key.project, [huge], user_id="baker")
        with patch("memory.retrieval.search.fuse", wraps=fuse) as fusion:
            self.search("baker", "What happened with the kiln?")
        (candidate,) = fusion.call_args.args[0]
        # Bounded work per candidate; the bar is near 0 either way (hundreds of words).
        assert candidate.words == len(huge[:WORDS_COUNTED].split()) < len(huge.split())
        assert candidate.words > 10 * CONFIRM_WORDS
