"""From the search signals to one score in (0, 1): features, a fitted ranker and a fitted
calibrator. Pure functions, no database.

Each candidate arrives with its signals (Signals): its cosine similarity to the query, its
keyword score (BM25 over the scope being searched, divided by the sum of the query words' IDF: in
[0, BM25_K1 + 1], comparable across queries; 0 when no query word matched), the query's entity
names it is linked to, its conversation, whether its event time is in the window the query names,
its length. features() turns them into FEATURES, each a plain function of the signals: the
cosine; the keyword bounded and counted as far as the meaning confirms it (confirmed()), and that
again in a long memory; the entities the query names and those matched by meaning, by rarity;
the best cosine and keyword of the other memories of the same conversation (the turns around a
relevant turn are often relevant too); whether it is outside the query's time window while
others are inside. query_features() adds what the candidates say together: how far the closest
stands out from the rest (distinctiveness()), and how far it falls short of an everyday fact
about no one (answer_gap(): memory.text.reference).

How they combine is fitted, not chosen: bench/fit_ranker.py fits, from labelled searches
recorded on the benchmark sets (bench/record.py, bench/judging.py), two logistic regressions per
embedding model and writes their coefficients to memory/retrieval/rankers/<model>.json, read
once per process (ranker_for()) and named in every score (Score.ranker):

  - the ranker, on pairs of one search's candidates, one relevant and one not (a linear
    RankNet): a candidate's `relevance` is the weighted sum of its features, and the results are
    in its order;
  - the calibrator, telling the evidence among each search's best candidates from the best
    candidate of a question nothing in the scope answers: the chance a memory is what the
    question is about, from its relevance and the query's two features. Its intercept is then
    placed by the threshold's rule: the default threshold, 0.5, keeps at least KEEP of the
    evidence the top 10 holds at threshold 0 on every set the fit saw.

The score a caller sees and `threshold` cuts on is the calibrator's; it rises with the relevance
(the fit checks it), so within a query the order is the ranker's, and across queries and scopes
the same score means the same. A model with no file of its own is scored with the bundled model's
(DEFAULT_RANKER), and its scores say so (`ranker`). docs/search.md explains it for a newcomer;
docs/benchmarks.md has the fit's figures, each on a set it did not see.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Hashable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# What a feature is (how much it counts is the fit's): these are definitions, not weights.
# The keyword score that bounds to 0.5 (a memory with the query's every word once scores about 1).
KEYWORD_HALF = 1.0
# A keyword counts as confirmed in a memory at least KEYWORD_CONFIRM close to the query in
# meaning (cosine), in proportion below; a memory longer than CONFIRM_WORDS words says other
# things too, which lowers its cosine with any one question: its bar is lowered in proportion.
KEYWORD_CONFIRM = 0.3
CONFIRM_WORDS = 20
# A memory's "longness", 0 at CONFIRM_WORDS words or fewer rising to 1 at LONG_WORDS.
LONG_WORDS = 80
# BM25's term-frequency saturation and length normalisation (the usual values).
BM25_K1 = 1.2
BM25_B = 0.75
# Term frequency: an occurrence in the memory's own text counts 1, in the previous message 0.5,
# in the next one 0.25 (the tsvector's weights A, B, C; D unused).
TERM_WEIGHTS = {"A": 1.0, "B": 0.5, "C": 0.25, "D": 0.1}
# Distinctiveness: the closest cosine less the mean of the next DISTINCTIVE_POOL - 1, the missing
# ones (a scope of three memories) counted at BACKGROUND, the cosine a question typically has
# with memories not about it (the bundled MiniLM: a median of 0.07 on the assistant sets).
DISTINCTIVE_POOL = 30
BACKGROUND = 0.1
# The answer gap's hinge: the closest cosine less the reference facts' closest, beyond this
# margin (a question the scope answers finds its answer about as close as an everyday fact).
ANSWER_MARGIN = 0.3
# The threshold's rule: at the default threshold the fit keeps at least this share of the
# evidence the top 10 holds at threshold 0, on each set it saw.
KEEP = 0.95

RANKERS = Path(__file__).resolve().parent / "rankers"
DEFAULT_RANKER = "local:all-MiniLM-L6-v2"

FEATURES = (
    "semantic",  # the cosine, clamped at 0
    "keyword",  # the keyword score bounded into [0, 1), as far as the meaning confirms it
    "keyword_long",  # the same in a long memory (times its longness())
    "entity",  # the query's names the memory is linked to, by rarity
    "entity_similar",  # names matched by meaning rather than by name, by rarity
    "conversation_semantic",  # the best cosine of the other memories of its conversation
    "conversation_keyword",  # the best keyword of the other memories of its conversation
    "out_of_window",  # 1: the query names a window, others fall in it, this one does not
)
CALIBRATION = (
    "relevance",  # the ranker's score
    "distinctiveness",  # how far the query's closest memory stands out (distinctiveness())
    "answer_gap",  # how far it falls short of the closest reference fact (answer_gap())
)


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
    relevance: float = 0.0  # the ranker's score
    distinctiveness: float = 0.0  # the query's, in the scope (the same for every candidate)
    answer_gap: float = 0.0  # the query's, in the scope (<= 0; the same for every candidate)
    ranker: str = ""  # the fitted file that scored it (Ranker.name)


@dataclass(frozen=True)
class Ranker:
    """A fitted ranker and calibrator (bench/fit_ranker.py): one weight per feature."""

    name: str  # the model and the file's digest: "<model>@<sha256[:12]>"
    ranker: tuple[float, ...]  # per FEATURES
    calibrator: tuple[float, ...]  # per CALIBRATION
    intercept: float

    @classmethod
    def from_json(cls, text: str, model: str) -> Ranker:
        data = json.loads(text)
        if tuple(data["features"]) != FEATURES or tuple(data["calibration"]) != CALIBRATION:
            raise ValueError(
                f"the ranker for {model} was fitted on other features; fit it again "
                "(bench/fit_ranker.py)"
            )
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        return cls(
            name=f"{data['model']}@{digest}",
            ranker=tuple(float(w) for w in data["ranker"]),
            calibrator=tuple(float(w) for w in data["calibrator"]),
            intercept=float(data["intercept"]),
        )


def ranker_file(model: str) -> Path:
    """Where the fitted ranker of embedding model `model` (Space.name) is kept."""
    return RANKERS / (model.replace(":", "-").replace("/", "-") + ".json")


@cache
def ranker_for(model: str) -> Ranker:
    """The fitted ranker of `model`, else the bundled model's; read once per process."""
    path = ranker_file(model)
    if not path.exists():
        path = ranker_file(DEFAULT_RANKER)
    return Ranker.from_json(path.read_text(), model)


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


def bounded_keyword(rank: float) -> float:
    """A keyword score (>= 0) mapped into [0, 1), increasing."""
    return rank / (rank + KEYWORD_HALF) if rank > 0 else 0.0


def confirmed(keyword: float, semantic: float, words: int = 0) -> float:
    """The bounded keyword signal as far as the meaning confirms it, in a memory of `words`
    words (0: unknown, counted as short): in full at a cosine of KEYWORD_CONFIRM or more (less
    for a long memory), in proportion below (0 for a memory unrelated in meaning). "How old is
    Ahmet?" shares "old" with "I drive an old Fiat." (cosine 0.10), not with "I turned 45."."""
    bar = KEYWORD_CONFIRM * min(1.0, CONFIRM_WORDS / max(1, words))
    return keyword * min(1.0, max(0.0, semantic) / bar)


def longness(words: int) -> float:
    """0 for a memory of CONFIRM_WORDS words or fewer (or unknown), rising to 1 at LONG_WORDS."""
    return min(1.0, max(0.0, (words - CONFIRM_WORDS) / (LONG_WORDS - CONFIRM_WORDS)))


def entity_strengths(candidates: Sequence[Signals]) -> list[float]:
    """Each candidate's entity signal in [0, 1]: the mean over the names any candidate carries
    of the candidate's, each by its rarity among the n candidates, log(1 + n / linked) /
    log(1 + n): 1 for a name one candidate carries, little for one most carry (the speaker of a
    whole conversation tells nothing apart)."""
    return _strengths([frozenset(c.entities) for c in candidates])


def _strengths(carried: Sequence[AbstractSet[str]]) -> list[float]:
    linked = Counter(name for names in carried for name in names)
    if not linked:
        return [0.0] * len(carried)
    total = len(carried)
    most = math.log(1 + total)
    rarity = {name: math.log(1 + total / count) / most for name, count in linked.items()}
    return [sum(rarity[name] for name in names) / len(linked) for names in carried]


def features(
    candidates: Sequence[Signals], names: AbstractSet[str] = frozenset()
) -> list[tuple[float, ...]]:
    """Each candidate's FEATURES, in the candidates' order; `names` are the entity names the
    query itself says (a candidate's others were matched by meaning)."""
    semantic = [max(0.0, c.semantic) for c in candidates]
    keyword = [
        confirmed(bounded_keyword(c.keyword), s, c.words)
        for c, s in zip(candidates, semantic, strict=True)
    ]
    carried = [frozenset(c.entities) for c in candidates]
    named = _strengths([e & names for e in carried])
    similar = _strengths([e - names for e in carried])
    around_semantic = around(candidates, semantic)
    around_keyword = around(candidates, keyword)
    window = any(c.in_window for c in candidates)
    return [
        (
            s,
            k,
            k * longness(c.words),
            e,
            es,
            around_semantic[i],
            around_keyword[i],
            1.0 if window and not c.in_window else 0.0,
        )
        for i, (c, s, k, e, es) in enumerate(
            zip(candidates, semantic, keyword, named, similar, strict=True)
        )
    ]


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


def query_features(candidates: Sequence[Signals], typical: float | None) -> tuple[float, float]:
    """The query's CALIBRATION features after the relevance: its distinctiveness in the scope
    and its answer gap (`typical`: its closest reference fact's cosine, None unknown)."""
    semantic = [c.semantic for c in candidates]
    return (distinctiveness(semantic), answer_gap(semantic, typical))


def linear(weights: Sequence[float], values: Sequence[float]) -> float:
    return math.fsum(w * v for w, v in zip(weights, values, strict=True))


def logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


def fuse(
    candidates: Sequence[Signals],
    ranker: Ranker,
    *,
    names: AbstractSet[str] = frozenset(),
    typical: float | None = None,
) -> list[Score]:
    """One Score per candidate, in the same order: the ranker's relevance of its features, the
    calibrator's score of that and of the query's features. Each depends on its own signals (and,
    through the entity rarity, its conversation's others and the query's features, on the
    others'), never on a rescaling of the list: an unrelated query's best scores low."""
    if not candidates:
        return []
    rows = features(candidates, names)
    distinct, gap = query_features(candidates, typical)
    scores = []
    for c, row in zip(candidates, rows, strict=True):
        relevance = linear(ranker.ranker, row)
        score = logistic(linear(ranker.calibrator, (relevance, distinct, gap)) + ranker.intercept)
        scores.append(
            Score(
                score=score,
                semantic=row[0],
                bm25=row[1],
                entity=row[3] + row[4],
                temporal=1.0 if c.in_window else 0.0,
                relevance=relevance,
                distinctiveness=distinct,
                answer_gap=gap,
                ranker=ranker.name,
            )
        )
    return scores
