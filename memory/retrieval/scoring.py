"""Fusion of the search signals into one score in [0, 1]. Pure functions, no database.

Each candidate arrives with its cosine similarity to the query (semantic) and its keyword score
(0 when no query word matched): BM25 over the scope being searched, divided by the sum of the
query words' IDF (so in [0, BM25_K1 + 1], comparable across queries). Its term frequencies count
a memory's own words fully and its neighbouring messages' words at TERM_WEIGHTS; a word's IDF
comes from how many of the scope's memories have it, so the speaker's name on every turn counts
little and a rare word a lot. Neither signal is stretched over the candidate set: the semantic
signal is the cosine itself (clamped at 0), the keyword signal is bounded as
score / (score + KEYWORD_HALF) and counts fully only in a memory at least KEYWORD_CONFIRM close to
the query in meaning (a long memory less), in proportion below (confirmed()). They are combined
as a weighted sum over the sum of fixed weights, the keyword's weight lowered in a short memory
(keyword_share(), by embedding model). Candidates from the same conversation as a strong hit get
a share of its score ("event prior", the hit's keyword at its full weight): the turns around a
relevant turn are often relevant too. That is a memory's relevance.

The score a caller sees, and the one `threshold` cuts on, calibrates it (calibrated()): a
logistic of the relevance plus the query's distinctiveness in the scope, how far the scope's
closest memory in meaning stands out from the next DISTINCTIVE_POOL - 1 (its cosine less their
mean). Long conversations share their topics and words from turn to turn, so a question asked of
the wrong conversation still finds memories of some relevance; what it does not find is one that
stands out. Less its answer gap: how far the scope's closest memory falls short of the closest
of the reference facts (memory.text.reference, everyday facts about no one), beyond
ANSWER_MARGIN, times ANSWER_GAP_WEIGHT. A question about something the scope never mentions
("What is Dana's blood type?") finds a reference fact far closer than anything in the scope; a
question the scope answers finds its answer about as close as that fact (on the three sets,
within ANSWER_MARGIN for all but a few: docs/benchmarks.md). The other constants were fitted on
the three benchmark sets together (bench/locomo.py and bench/longmemeval.py --calibration,
bench/assistant.py: the best result of questions the scope answers against that of questions it
does not, each set weighing the same), and SCORE_MIDPOINT
placed so that the default threshold, 0.5, keeps at least 95 % of the evidence the top 10 holds
at threshold 0 on each (docs/benchmarks.md has the figures). The fit's steepness (29) is lowered
to SCORE_STEEPNESS so that the scores spread over the range where a threshold is worth choosing
(0.05 to 0.95: relevance + DISTINCTIVE_WEIGHT * distinctiveness 0.3 either side of the midpoint)
instead of crowding at 0 and 1; it moves no cut at 0.5. Within one query the score
follows the relevance, so the order is the relevance's; across queries and scopes the same score
means the same, and a fixed threshold tells a related memory from an unrelated one.

Temporal intent: when the query names a time window (memory.text.temporal: "last week",
"in May 2023", relative to the request's reference date) and some candidates' event times fall in
it, the others' fused relevance is multiplied by OUT_OF_WINDOW (a boost of the window, not a
filter: a query's words may name a time loosely).

The entity signal: each candidate arrives with the query's entity names it is linked to. A name
counts by its rarity among the n candidates, log(1 + n / linked) / log(1 + n): 1 for a name only
one candidate carries, little for a name most carry (the speaker of a whole conversation tells
nothing apart). A candidate's signal is the mean over the query's names that any candidate carries,
so in [0, 1]; weighted by ENTITY_WEIGHT (fuse()'s entity_weight: at 0 the scores are exactly those
without it). A name matched by meaning rather than by name (the query says "cities", the scope
knows "rome") counts SIMILAR_NAME_WEIGHT of a named one: on LoCoMo (bench/locomo.py) it adds recall
on multi-hop and open-domain questions, and at full weight it costs precision (the best result is
less often an evidence turn).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

KEYWORD_WEIGHT = 1.0
SEMANTIC_WEIGHT = 0.5
# The entity signal's weight (memories linked to entities the query names), against those two.
ENTITY_WEIGHT = 0.5
EVENT_PRIOR = 0.3
# With temporal intent ("last week", "in May 2023"), the fused relevance of a memory whose event
# time falls outside the window is multiplied by this (if any candidate falls inside).
OUT_OF_WINDOW = 0.75
# The keyword score that bounds to 0.5: a memory with the query's every word once in its own text
# scores about 1 (BM25_K1 + 1 at most), one with its rarer half about 0.5.
KEYWORD_HALF = 1.0
# A keyword match counts fully in a memory at least KEYWORD_CONFIRM close to the query in meaning
# (cosine), in proportion below: a word shared by chance is not confirmed by the meaning. "How old
# is Ahmet?" shares "old" with "I drive an old Fiat." (cosine 0.10), not with "I turned 45 last
# March." (0.36); "Where does Dana live?" shares "live" with her sister's city. A word the query is
# about is: a rare name or code alone as the query has cosine 0.4-0.55 with a short memory holding
# it. A memory longer than CONFIRM_WORDS words says other things too, which lowers its cosine with
# any one question: its bar is lowered in proportion (a fact in passing in a long message, "by the
# way, I met Emma ...", keeps its keyword). Chosen on the benchmark sets (docs/benchmarks.md:
# 0.25-0.4 and 12-30 words rank alike on LoCoMo and LongMemEval; without the length, LongMemEval's
# long turns lose evidence).
KEYWORD_CONFIRM = 0.3
CONFIRM_WORDS = 20
# The keyword signal's weight by the memory's length: SHORT_KEYWORD_SHARE of KEYWORD_WEIGHT in a
# memory of CONFIRM_WORDS words or fewer, rising in proportion to all of it at LONG_WORDS words
# (keyword_share()). A short memory says one thing, which its vector holds: a word it shares
# with the question ("live" in "My sister lives in Denver." for "Where does the user live?")
# should not outweigh how close it is in meaning. A long one says many things and its vector
# averages them, so the question's rare word in it tells more than the distance. The weights
# are not renormalised: a short memory's relevance counts its keyword for less. On all four
# sets together (docs/benchmarks.md, "Both readings of a question, and the keyword's weight by
# length"), for all-MiniLM-L6-v2: a share of 0.5 ranked every set better; 0.4 ranked LoCoMo and
# LongMemEval worse than 0.5; a long length of 60-80 words ranked alike, 120 lost LongMemEval's
# MRR. Another model may want another share (SHORT_KEYWORD_SHARES).
SHORT_KEYWORD_SHARE = 0.5
LONG_WORDS = 80
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
# The calibrated score: 1 / (1 + exp(-SCORE_STEEPNESS * (relevance + DISTINCTIVE_WEIGHT *
# distinctiveness - SCORE_MIDPOINT))); the distinctiveness is measured over the candidates'
# DISTINCTIVE_POOL best cosines (see above).
SCORE_STEEPNESS = 10.0
DISTINCTIVE_WEIGHT = 0.83
SCORE_MIDPOINT = 0.175
DISTINCTIVE_POOL = 30
# The cosine a question typically has with the memories of a scope that are not about it (the
# bundled MiniLM: the median on bench/assistant.py's scopes is 0.07); a scope with fewer than
# DISTINCTIVE_POOL candidates has its missing ones counted at this, so that in a scope of three
# memories a weak best does not stand out from nothing.
BACKGROUND = 0.1
# The answer gap: the scope's closest cosine less the reference facts' closest, when below
# -ANSWER_MARGIN, counts ANSWER_GAP_WEIGHT times against the score. The margin is the widest
# gap at which the default threshold still keeps the evidence it kept without it on LoCoMo and
# the assistant set (bench/locomo.py, bench/assistant.py; bench/longmemeval.py: 99 of 100
# questions); the weight, past 3, changes little.
ANSWER_MARGIN = 0.3
ANSWER_GAP_WEIGHT = 5.0


# The midpoint by embedding model (memory.text.embeddings.Space.name), placed by the same rule
# for that model's cosines; a model not here (a hosted one) gets all-MiniLM-L6-v2's,
# SCORE_MIDPOINT. all-mpnet-base-v2's scores stand further apart: at its own midpoint it keeps the
# evidence by the rule and returns nothing for more questions about something never said
# (docs/benchmarks.md, "Both readings of a question, and the keyword's weight by length").
MIDPOINTS = {"local:all-mpnet-base-v2": 0.22}
# The keyword's share in a short memory by embedding model, else SHORT_KEYWORD_SHARE. For
# all-mpnet-base-v2 any lower share (0.5, 0.75) ranked the assistant sets better and cost
# LongMemEval's MRR (0.745 -> 0.722-0.723): its short memories keep the full keyword weight. Its
# other constants are MiniLM's.
SHORT_KEYWORD_SHARES = {"local:all-mpnet-base-v2": 1.0}


def midpoint_for(model: str) -> float:
    return MIDPOINTS.get(model, SCORE_MIDPOINT)


def short_keyword_share_for(model: str) -> float:
    return SHORT_KEYWORD_SHARES.get(model, SHORT_KEYWORD_SHARE)


@dataclass(frozen=True)
class Signals:
    semantic: float  # cosine similarity, [-1, 1]
    keyword: float  # BM25 / the query words' summed IDF, >= 0
    group: Hashable = None  # the conversation (else the add request) the memory came from
    entities: tuple[str, ...] = ()  # the query's entity names the memory is linked to
    # Whether the memory's event time is in the time window the query names; None: no window.
    in_window: bool | None = None
    words: int = 0  # the memory's own text's length in words (0: unknown)


@dataclass(frozen=True)
class Score:
    score: float  # calibrated: what the caller sees and `threshold` cuts on
    semantic: float
    bm25: float
    entity: float = 0.0
    temporal: float = 0.0  # 1 when the memory's event time is in the window the query names
    relevance: float = 0.0  # the fused signals
    distinctiveness: float = 0.0  # the query's, in the scope (the same for every candidate)
    answer_gap: float = 0.0  # the query's, in the scope (<= 0; the same for every candidate)


def distinctiveness(semantic: Sequence[float]) -> float:
    """How far the closest of the candidates' cosines (clamped at 0) stands out from the next
    DISTINCTIVE_POOL - 1: the best less their mean, the missing ones counted at BACKGROUND."""
    closest = sorted((max(0.0, s) for s in semantic), reverse=True)[:DISTINCTIVE_POOL]
    if not closest:
        return 0.0
    rest = sum(closest[1:]) + BACKGROUND * (DISTINCTIVE_POOL - len(closest))
    return closest[0] - rest / (DISTINCTIVE_POOL - 1)


def answer_gap(semantic: Sequence[float], typical: float | None) -> float:
    """How far the closest of the candidates' cosines falls short of `typical` (the query's
    closest reference fact), beyond ANSWER_MARGIN: <= 0; 0 when `typical` is unknown."""
    if typical is None:
        return 0.0
    closest = max((max(0.0, s) for s in semantic), default=0.0)
    return min(0.0, closest - typical + ANSWER_MARGIN)


def calibrated(
    relevance: float, distinct: float, gap: float = 0.0, midpoint: float = SCORE_MIDPOINT
) -> float:
    """The score of a memory of this relevance for a query of this distinctiveness and answer
    gap, in (0, 1)."""
    x = SCORE_STEEPNESS * (
        relevance + DISTINCTIVE_WEIGHT * distinct + ANSWER_GAP_WEIGHT * gap - midpoint
    )
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


def bounded_keyword(rank: float) -> float:
    """A keyword score (>= 0) mapped into [0, 1), increasing."""
    return rank / (rank + KEYWORD_HALF) if rank > 0 else 0.0


def confirmed(keyword: float, semantic: float, words: int = 0) -> float:
    """The bounded keyword signal as it counts, in a memory of `words` words (0: unknown, counted
    as short): in full at a cosine of KEYWORD_CONFIRM or more (less for a long memory), in
    proportion below (0 for a memory unrelated in meaning)."""
    bar = KEYWORD_CONFIRM * min(1.0, CONFIRM_WORDS / max(1, words))
    return keyword * min(1.0, max(0.0, semantic) / bar)


def keyword_share(words: int, short: float = SHORT_KEYWORD_SHARE) -> float:
    """The share of KEYWORD_WEIGHT a memory of `words` words (0: unknown, counted as short)
    gives its keyword signal, `short` in a short memory (see above)."""
    if words <= CONFIRM_WORDS:
        return short
    longer = min(1.0, (words - CONFIRM_WORDS) / (LONG_WORDS - CONFIRM_WORDS))
    return short + (1 - short) * longer


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
    typical: float | None = None,
    midpoint: float = SCORE_MIDPOINT,
    short_keyword_share: float = SHORT_KEYWORD_SHARE,
) -> list[Score]:
    """Return one Score per candidate, in the same order. Each depends on its own signals (and,
    through the entity rarity and the conversation prior, on the others') and on how far the
    query's closest memory stands out and on how far it falls short of `typical` (the query's
    closest reference fact), never on a rescaling of the list: an unrelated query's best scores
    low."""
    if not candidates:
        return []
    semantic = [max(0.0, c.semantic) for c in candidates]
    keyword = [
        confirmed(bounded_keyword(c.keyword), s, c.words)
        for c, s in zip(candidates, semantic, strict=True)
    ]
    entity = (
        entity_strengths(candidates, similar_names)
        if entity_weight > 0
        else [0.0] * len(candidates)
    )
    weight = SEMANTIC_WEIGHT + KEYWORD_WEIGHT + max(0.0, entity_weight)
    # What a memory lends its conversation counts its keyword at the full weight: a word of the
    # question said in a short turn may not make that turn the answer, but it does say the
    # conversation was about it.
    lent = [
        (SEMANTIC_WEIGHT * s + KEYWORD_WEIGHT * k + entity_weight * e) / weight
        for s, k, e in zip(semantic, keyword, entity, strict=True)
    ]
    base = [
        (
            SEMANTIC_WEIGHT * s
            + KEYWORD_WEIGHT * keyword_share(c.words, short_keyword_share) * k
            + entity_weight * e
        )
        / weight
        for c, s, k, e in zip(candidates, semantic, keyword, entity, strict=True)
    ]
    best_in_group: dict[Hashable, float] = {}
    for candidate, value in zip(candidates, lent, strict=True):
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
    distinct = distinctiveness([c.semantic for c in candidates])
    gap = answer_gap([c.semantic for c in candidates], typical)
    return [
        Score(
            score=calibrated(f, distinct, gap, midpoint),
            semantic=s,
            bm25=k,
            entity=e,
            temporal=1.0 if i else 0.0,
            relevance=f,
            distinctiveness=distinct,
            answer_gap=gap,
        )
        for f, s, k, e, i in zip(fused, semantic, keyword, entity, inside, strict=True)
    ]
