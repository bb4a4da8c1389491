"""The candidate features a fitted ranker would combine (bench/fit_ranker.py): plain functions of
the signals search already computes (memory.retrieval.scoring.Signals), through the score's own
helpers (the keyword bounded and confirmed by the meaning, the entities by rarity, the query's
distinctiveness and answer gap). Not the score engram serves: docs/benchmarks.md ("A ranking
learnt from data, judged leave-one-data-set-out") has why not yet.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

from memory.retrieval.scoring import (
    CONFIRM_WORDS,
    LONG_WORDS,
    Signals,
    answer_gap,
    bounded_keyword,
    confirmed,
    distinctiveness,
    entity_strengths,
)

FEATURES = (
    "semantic",  # the cosine, clamped at 0
    "keyword",  # the keyword score, bounded into [0, 1)
    "keyword_confirmed",  # the same, as far as the meaning confirms it (scoring.confirmed)
    "keyword_long",  # the confirmed keyword in a long memory (times its longness)
    "entity",  # the query's names the memory is linked to, by rarity
    "entity_similar",  # names matched by meaning rather than by name, by rarity
    "conversation_semantic",  # the best cosine of the other memories of its conversation
    "conversation_keyword",  # the best confirmed keyword of the others of its conversation
    "out_of_window",  # 1: the query names a window, others fall in it, this one does not
    "length",  # log(1 + words)
)
CALIBRATION = (
    "relevance",  # the ranker's score
    "behind_best",  # the relevance less the query's best (<= 0)
    "closest",  # the query's closest cosine in the scope
    "distinctiveness",  # how far the closest stands out (scoring.distinctiveness)
    "answer_gap",  # the closest less the closest reference fact's, beyond the margin (<= 0)
    "typical_gap",  # the closest less the closest reference fact's (0: unknown)
)


def longness(words: int) -> float:
    """0 for a memory of CONFIRM_WORDS words or fewer (or unknown), rising to 1 at LONG_WORDS."""
    return min(1.0, max(0.0, (words - CONFIRM_WORDS) / (LONG_WORDS - CONFIRM_WORDS)))


def _only(candidates: Sequence[Signals], names: AbstractSet[str]) -> list[Signals]:
    return [replace(c, entities=tuple(n for n in c.entities if n in names)) for c in candidates]


def around(candidates: Sequence[Signals], values: Sequence[float]) -> list[float]:
    """Each candidate's best value among the other candidates of its conversation (0: none):
    the turns around a relevant turn are often relevant too."""
    best: dict[Hashable, list[float]] = {}  # the two best of each conversation
    for c, v in zip(candidates, values, strict=True):
        if c.group is not None:
            top = best.setdefault(c.group, [0.0, 0.0])
            if v > top[0]:
                top[:] = [v, top[0]]
            elif v > top[1]:
                top[1] = v
    out = []
    for c, v in zip(candidates, values, strict=True):
        if c.group is None:
            out.append(0.0)
        else:
            first, second = best[c.group]
            out.append(second if v >= first else first)
    return out


def features(
    candidates: Sequence[Signals], names: AbstractSet[str] = frozenset()
) -> list[tuple[float, ...]]:
    """Each candidate's FEATURES, in the candidates' order; `names` are the entity names the
    query itself says (a candidate's others were matched by meaning)."""
    semantic = [max(0.0, c.semantic) for c in candidates]
    keyword = [bounded_keyword(c.keyword) for c in candidates]
    sure = [confirmed(k, s, c.words) for c, s, k in zip(candidates, semantic, keyword, strict=True)]
    linked = {n for c in candidates for n in c.entities}
    named = entity_strengths(_only(candidates, linked & names))
    similar = entity_strengths(_only(candidates, linked - names))
    around_semantic = around(candidates, semantic)
    around_keyword = around(candidates, sure)
    window = any(c.in_window for c in candidates)
    return [
        (
            s,
            k,
            kc,
            kc * longness(c.words),
            e,
            es,
            around_semantic[i],
            around_keyword[i],
            1.0 if window and not c.in_window else 0.0,
            math.log1p(max(0, c.words)),
        )
        for i, (c, s, k, kc, e, es) in enumerate(
            zip(candidates, semantic, keyword, sure, named, similar, strict=True)
        )
    ]


def query_features(
    candidates: Sequence[Signals], typical: float | None
) -> tuple[float, float, float, float]:
    """The query's CALIBRATION features after the first two: its closest cosine, distinctiveness,
    answer gap (hinged) and typical gap (not)."""
    semantic = [c.semantic for c in candidates]
    closest = max((max(0.0, s) for s in semantic), default=0.0)
    typical_gap = 0.0 if typical is None else closest - typical
    return (closest, distinctiveness(semantic), answer_gap(semantic, typical), typical_gap)
