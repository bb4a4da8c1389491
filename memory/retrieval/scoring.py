"""Fusion of the search signals into one score in [0, 1]. Pure functions, no database.

Each candidate arrives with its cosine similarity to the query (semantic) and its keyword score
(0 when no query word matched): BM25 over the scope being searched, divided by the sum of the
query words' IDF (so in [0, BM25_K1 + 1], comparable across queries). Its term frequencies count
a memory's own words fully and its neighbouring messages' words at TERM_WEIGHTS; a word's IDF
comes from how many of the scope's memories have it, so the speaker's name on every turn counts
little and a rare word a lot. Neither signal is stretched over the candidate set: the semantic
signal is the cosine itself (clamped at 0), the keyword signal is bounded as
score / (score + KEYWORD_HALF). They are combined as a weighted mean with fixed
weights. Candidates from the same conversation as a strong hit get a share of its score ("event
prior"): the turns around a relevant turn are often relevant too. That fused relevance is the
best candidate's score as it is, so the best score of a query means the same whatever else the
query found: it compares across queries and a fixed threshold on it tells a related query from an
unrelated one. Every other candidate's is discounted by how far it is behind the best, times
(fused / best) ** RELATIVE_EXPONENT, which keeps the order and lets a fixed threshold cut a
list's tail as well (bench/locomo.py --calibration reports precision and recall at fixed
thresholds).

Temporal intent: when the query names a time window (memory.text.temporal: "last week",
"in May 2023", relative to the request's reference date) and some candidates' event times fall in
it, the others' fused relevance is multiplied by OUT_OF_WINDOW (a boost of the window, not a
filter: a query's words may name a time loosely).

The entity signal: each candidate arrives with the query's entity names it is linked to. A name
counts by its rarity among the n candidates, log(1 + n / linked) / log(1 + n): 1 for a name
only one candidate carries, little for a name most carry (the speaker of a whole conversation
tells nothing apart). A candidate's signal is the mean over the query's names that any candidate
carries, so in [0, 1]; weighted by ENGRAM_SEARCH_ENTITY_WEIGHT (0: off, the scores are exactly
those without it). A name matched by meaning rather than by name (the query says "cities", the
scope knows "rome") counts SIMILAR_NAME_WEIGHT of a named one: on LoCoMo (bench/locomo.py) it
adds recall on multi-hop and open-domain questions, and at full weight it costs precision (the
best result is less often an evidence turn).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

KEYWORD_WEIGHT = 1.0
SEMANTIC_WEIGHT = 0.5
EVENT_PRIOR = 0.3
# A candidate's score is its own fused relevance times (that / the query's best) ** this: the
# best result keeps its absolute score, the others are discounted by how far behind it they are.
RELATIVE_EXPONENT = 3.0
# With temporal intent ("last week", "in May 2023"), the fused relevance of a memory whose event
# time falls outside the window is multiplied by this (if any candidate falls inside).
OUT_OF_WINDOW = 0.75
# The keyword score that bounds to 0.5: a memory with the query's every word once in its own text
# scores about 1 (BM25_K1 + 1 at most), one with its rarer half about 0.5.
KEYWORD_HALF = 1.0
# BM25's term-frequency saturation and length normalisation (the usual values; LoCoMo recall@10
# moved by under 0.003 over k1 0.9-1.5, b 0.5-0.75). The length of a memory is its number of
# distinct words (with its neighbours'), against the scope's mean.
BM25_K1 = 1.2
BM25_B = 0.75
# Term frequency: an occurrence in the memory's own text counts 1, in the previous message 0.5,
# in the next one 0.25 (the tsvector's weights A, B, C; D unused); further occurrences add less
# (Postgres' ts_rank of the one word: memory.retrieval.search.RANK_SCALE).
TERM_WEIGHTS = {"A": 1.0, "B": 0.5, "C": 0.25, "D": 0.1}
# How much an entity name matched by meaning counts against one the query names.
SIMILAR_NAME_WEIGHT = 0.3


@dataclass(frozen=True)
class Signals:
    semantic: float  # cosine similarity, [-1, 1]
    keyword: float  # BM25 / the query words' summed IDF, >= 0
    group: Hashable = None  # the conversation (else the add request) the memory came from
    entities: tuple[str, ...] = ()  # the query's entity names the memory is linked to
    # Whether the memory's event time is in the time window the query names; None: no window.
    in_window: bool | None = None


@dataclass(frozen=True)
class Score:
    score: float
    semantic: float
    bm25: float
    entity: float = 0.0
    temporal: float = 0.0  # 1 when the memory's event time is in the window the query names


def bounded_keyword(rank: float) -> float:
    """A keyword score (>= 0) mapped into [0, 1), increasing."""
    return rank / (rank + KEYWORD_HALF) if rank > 0 else 0.0


def entity_strengths(
    candidates: Sequence[Signals], similar: AbstractSet[str] = frozenset()
) -> list[float]:
    """Each candidate's entity signal in [0, 1]: its names, weighted by rarity, the `similar`
    ones (matched by meaning) by SIMILAR_NAME_WEIGHT too (see above)."""
    linked = Counter(name for c in candidates for name in set(c.entities))
    if not linked:
        return [0.0] * len(candidates)
    total = len(candidates)
    most = math.log(1 + total)

    def strength(name: str) -> float:
        rarity = math.log(1 + total / linked[name]) / most
        return rarity * SIMILAR_NAME_WEIGHT if name in similar else rarity

    return [sum(strength(name) for name in set(c.entities)) / len(linked) for c in candidates]


def fuse(
    candidates: Sequence[Signals],
    *,
    entity_weight: float = 0.0,
    similar_names: AbstractSet[str] = frozenset(),
) -> list[Score]:
    """Return one Score per candidate, in the same order. The best candidate's score depends
    on its own signals (and, through the entity rarity and the conversation prior, on the
    others'), never on a rescaling of the list: an unrelated query's best scores low."""
    if not candidates:
        return []
    semantic = [max(0.0, c.semantic) for c in candidates]
    keyword = [bounded_keyword(c.keyword) for c in candidates]
    entity = (
        entity_strengths(candidates, similar_names)
        if entity_weight > 0
        else [0.0] * len(candidates)
    )
    weight = SEMANTIC_WEIGHT + KEYWORD_WEIGHT + max(0.0, entity_weight)
    base = [
        (SEMANTIC_WEIGHT * s + KEYWORD_WEIGHT * k + entity_weight * e) / weight
        for s, k, e in zip(semantic, keyword, entity, strict=True)
    ]
    best_in_group: dict[Hashable, float] = {}
    for candidate, value in zip(candidates, base, strict=True):
        if candidate.group is not None:
            best_in_group[candidate.group] = max(best_in_group.get(candidate.group, 0.0), value)
    fused = [
        (value + EVENT_PRIOR * best_in_group.get(c.group, 0.0) * (c.group is not None))
        / (1 + EVENT_PRIOR)
        for c, value in zip(candidates, base, strict=True)
    ]
    inside = [bool(c.in_window) for c in candidates]
    if any(inside):
        fused = [f if i else f * OUT_OF_WINDOW for f, i in zip(fused, inside, strict=True)]
    best = max(fused)
    return [
        Score(
            score=min(1.0, max(0.0, f * (f / best) ** RELATIVE_EXPONENT if best > 0 else 0.0)),
            semantic=s,
            bm25=k,
            entity=e,
            temporal=1.0 if i else 0.0,
        )
        for f, s, k, e, i in zip(fused, semantic, keyword, entity, inside, strict=True)
    ]
