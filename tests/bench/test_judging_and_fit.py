"""The benchmark sets' judging (bench/judging.py: the figures bench/replay.py and
bench/fit_ranker.py print) on searches whose answers are known, and the ranker's fit
(bench/fit_ranker.py): the same data gives the same file, it ranks what it was taught, its
calibrated score rises with the relevance, and its threshold keeps what the rule says."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import fit_ranker
import judging

from memory.retrieval import scoring
from memory.retrieval.scoring import Signals
from memory.text.query import Query


def search(
    user: str, question: str, signals: Sequence[Signals], ids: Sequence[int]
) -> judging.Search:
    query = Query(
        text=question, vector="", names=(), word_vectors=None, window=None, keywords=question,
        language="en", typical=0.4, model="local:test",
    )  # fmt: skip
    return judging.Search(user, question, query, list(signals), [{"fact": i} for i in ids])


def persona_item(
    relevant: Sequence[bool | None], *, named: bool = False, off_topic: bool = False
) -> judging.Judged:
    signals = [Signals(semantic=0.1, keyword=0.0) for _ in relevant]
    ids = list(range(len(relevant)))
    answers = frozenset(i for i, r in enumerate(relevant) if r)
    found = search("dana-assistant-x", "q", signals, ids)
    return judging.Judged(
        "assistant", found, list(relevant), [frozenset({i}) for i in ids], answers,
        named=named, off_topic=off_topic,
    )  # fmt: skip


def test_persona_figures_count_first_returned_and_empty() -> None:
    first = persona_item([True, False, False], named=True)
    second = persona_item([False, True, False], named=True)
    other = persona_item([False, False, True])
    empty = persona_item([False, False], off_topic=True)
    answered = persona_item([False, False], off_topic=True)
    scores = {
        id(first.search): [0.9, 0.2, 0.1],  # first, returned
        id(second.search): [0.9, 0.6, 0.1],  # second, returned
        id(other.search): [0.9, 0.6, 0.4],  # third, cut by the threshold
        id(empty.search): [0.4, 0.3],  # nothing passes 0.5
        id(answered.search): [0.7, 0.3],  # something does
    }
    figures = judging.measure([first, second, other, empty, answered], lambda s: scores[id(s)], 0.5)
    assert figures["first"] == pytest.approx(1 / 3)
    assert figures["named"] == pytest.approx(1 / 2)
    assert figures["returned"] == pytest.approx(2 / 3)
    assert figures["empty"] == pytest.approx(1 / 2)
    assert figures["questions"] == 3


def test_locomo_figures_are_recall_mrr_and_the_evidence_kept() -> None:
    signals = [Signals(semantic=0.1, keyword=0.0) for _ in range(12)]
    found = search("locomo-conv-1-x", "q", signals, list(range(12)))
    ids = [frozenset({f"D1:{i}"}) for i in range(12)]
    evidence = frozenset({"D1:1", "D1:11"})  # ranked second and outside the top 10
    relevant: list[bool | None] = [bool(i & evidence) for i in ids]
    item = judging.Judged("locomo", found, relevant, ids, evidence)
    scores = [0.9, 0.8, *[0.3] * 9, 0.0]
    figures = judging.measure([item], lambda s: scores, 0.5)
    assert figures["recall"] == 0.5 and figures["mrr"] == 0.5 and figures["kept"] == 1.0
    # At a threshold above the evidence's score, what the top 10 held is not kept.
    assert judging.measure([item], lambda s: scores, 0.85)["kept"] == 0.0


def synthetic_sets(seed: int) -> dict[str, list[fit_ranker.Prepared]]:
    """Two sets of searches where the answer is the closest in meaning with some noise, and a
    few questions nothing answers (everything far)."""
    rng = random.Random(seed)
    sets: dict[str, list[fit_ranker.Prepared]] = {}
    for name in ("assistant", "work"):
        items = []
        for q in range(40):
            off = q % 5 == 0
            answer = None if off else rng.randrange(8)
            signals = [
                Signals(
                    semantic=(0.7 if i == answer else 0.2) + rng.uniform(-0.15, 0.15) - off * 0.1,
                    keyword=rng.choice([0.0, 0.0, 0.5, 1.5]),
                    group=f"g{q}-{i // 2}",
                    words=rng.randrange(3, 30),
                )
                for i in range(8)
            ]
            found = search(f"p{q}-assistant-x", f"q{q}", signals, list(range(8)))
            relevant: list[bool | None] = [i == answer for i in range(8)]
            evidence = frozenset() if off else frozenset({answer})
            item = judging.Judged(
                name, found, relevant, [frozenset({i}) for i in range(8)], evidence, off_topic=off
            )
            items.append(item)
        sets[name] = fit_ranker.prepare(items)
    return sets


def fitted(seed: int) -> tuple[str, fit_ranker.Fit, dict[str, list[fit_ranker.Prepared]]]:
    sets = synthetic_sets(seed)
    prepared = {id(p.item.search): p for items in sets.values() for p in items}
    fit = fit_ranker.fit(sets, prepared)
    return fit_ranker.fitted_file(fit, "local:test", sets, "test"), fit, sets


def test_the_same_data_gives_the_same_file() -> None:
    first, _, _ = fitted(7)
    again, _, _ = fitted(7)
    assert first == again
    data = json.loads(first)
    assert data["features"] == list(scoring.FEATURES)
    assert len(data["ranker"]) == len(scoring.FEATURES)
    assert fitted(8)[0] != first  # other data, another fit: the file is the data's


def test_the_fit_ranks_what_it_was_taught_and_keeps_by_the_rule() -> None:
    _, fit, sets = fitted(7)
    prepared = {id(p.item.search): p for items in sets.values() for p in items}
    assert fit.ranker[scoring.FEATURES.index("semantic")] > 0
    # The calibrated score rises with the relevance within a query.
    assert fit.calibrator[0] + fit.calibrator[1] > 0
    for items in sets.values():
        figures = judging.measure([p.item for p in items], fit.scorer(prepared), 0.5)
        assert figures["first"] >= 0.9
        assert figures["kept"] >= scoring.KEEP
