"""Fusion of the search signals into one score in [0, 1]. Pure functions, no database.

Each candidate arrives with its cosine similarity to the query (semantic) and its keyword rank
(ts_rank over the weighted tsvector, 0 when no query word matched). Both are min-max normalised
over the candidate set and combined as a weighted sum, which ranked better than reciprocal rank
fusion on the LoCoMo retrieval task (see bench/locomo.py). Candidates from the same add request
as a strong hit get a share of its score ("event prior"): the turns around a relevant turn are
often relevant too.

The entity signal: each candidate arrives with the query's entity names it is linked to. A name
counts by its rarity among the n candidates, log(1 + n / linked) / log(1 + n): 1 for a name
only one candidate carries, little for a name most carry (the speaker of a whole conversation
tells nothing apart). A candidate's signal is the mean over the query's names that any candidate
carries, so in [0, 1] without min-max stretching (which would turn a name half the candidates
carry into a full boost); weighted by ENGRAM_SEARCH_ENTITY_WEIGHT (0: off, the scores are
exactly those without it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

KEYWORD_WEIGHT = 1.0
SEMANTIC_WEIGHT = 0.5
EVENT_PRIOR = 0.3


@dataclass(frozen=True)
class Signals:
    semantic: float  # cosine similarity, [-1, 1]
    keyword: float  # ts_rank, >= 0
    group: Hashable = None  # the add request (event) the memory came from
    entities: tuple[str, ...] = ()  # the query's entity names the memory is linked to


@dataclass(frozen=True)
class Score:
    score: float
    semantic: float
    bm25: float
    entity: float = 0.0


def _normalise(values: Sequence[float]) -> list[float]:
    low, high = min(values), max(values)
    if high - low < 1e-12:
        return [1.0 if high > 0 else 0.0 for _ in values]
    return [(v - low) / (high - low) for v in values]


def entity_strengths(candidates: Sequence[Signals]) -> list[float]:
    """Each candidate's entity signal in [0, 1]: its names, weighted by rarity (see above)."""
    linked = Counter(name for c in candidates for name in set(c.entities))
    if not linked:
        return [0.0] * len(candidates)
    total = len(candidates)
    most = math.log(1 + total)
    return [
        sum(math.log(1 + total / linked[name]) / most for name in set(c.entities)) / len(linked)
        for c in candidates
    ]


def fuse(candidates: Sequence[Signals], *, entity_weight: float = 0.0) -> list[Score]:
    """Return one Score per candidate, in the same order."""
    if not candidates:
        return []
    semantic = [max(0.0, c.semantic) for c in candidates]
    keyword = [c.keyword for c in candidates]
    entity = entity_strengths(candidates) if entity_weight > 0 else [0.0] * len(candidates)
    sem_n = _normalise(semantic)
    kw_n = _normalise(keyword) if any(k > 0 for k in keyword) else [0.0] * len(keyword)
    ent_n = entity
    weight = SEMANTIC_WEIGHT + (KEYWORD_WEIGHT if any(k > 0 for k in keyword) else 0.0)
    weight += entity_weight if any(e > 0 for e in entity) else 0.0
    base = [
        (SEMANTIC_WEIGHT * s + KEYWORD_WEIGHT * k + entity_weight * e) / weight
        for s, k, e in zip(sem_n, kw_n, ent_n, strict=True)
    ]
    best_in_group: dict[Hashable, float] = {}
    for candidate, value in zip(candidates, base, strict=True):
        if candidate.group is not None:
            best_in_group[candidate.group] = max(best_in_group.get(candidate.group, 0.0), value)
    scores = []
    for candidate, value, s, k, e in zip(candidates, base, semantic, kw_n, ent_n, strict=True):
        prior = best_in_group.get(candidate.group, 0.0) if candidate.group is not None else 0.0
        fused = (value + EVENT_PRIOR * prior) / (1 + EVENT_PRIOR)
        scores.append(Score(score=min(1.0, fused), semantic=s, bm25=k, entity=e))
    return scores
