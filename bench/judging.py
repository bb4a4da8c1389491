"""Searches recorded by bench/record.py, labelled and judged as their benchmarks judge them: the
one implementation bench/replay.py (figures under changed constants) and bench/fit_ranker.py (the
ranker's fit and its leave-one-data-set-out table) share.

A recorded search is told apart by its scope's user id (as the benchmarks name them) and its
question:

  - bench/assistant.py (`<persona>-assistant-<run>`), one data set per file of bench/data/
    (assistant, assistant-heldout, work, support), and bench/languages.py --split fit (one set,
    languages: bench/data/languages/'s personas a fit may use): a question the persona's facts answer (its
    answers are relevant), or an off-topic one (nothing is; the facts it may cite are neither);
  - bench/locomo.py (`locomo-<sample>-<run>`): a question of the conversation (its evidence
    turns are relevant), or another conversation's (nothing is);
  - bench/longmemeval.py (`lme-<question>-<run>`): the scope's question (its evidence turns), or
    another question's (nothing is).

A search recorded twice (the benchmarks ask at several thresholds) counts once; a warm-up search
("warm up") is no one's question and is left out.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import ROOT
from locomo import evidence_ids
from longmemeval import identities

from memory.retrieval import scoring
from memory.text.query import Query

SHARED = ROOT.parent / "shared" / "data"
DATA = ROOT / "bench" / "data"
# The assistant-style sets, by the name the tables give them. support.json is the held-out set:
# bench/fit_ranker.py leaves it out of every fit.
# "languages": the personas of bench/data/languages/ a fit may use, one per language (the
# held-out ones, <lang>-heldout.json, are in no set: never recorded, never fitted).
PERSONA_SETS = {
    "assistant": [DATA / "assistant.json"],
    "assistant-heldout": [DATA / "assistant-heldout.json"],
    "work": [DATA / "work.json"],
    "support": [DATA / "support.json"],
    "languages": sorted(p for p in (DATA / "languages").glob("*.json") if "-heldout" not in p.stem),
}
SETS = (*PERSONA_SETS, "locomo", "longmemeval")
SCOPES = re.compile(r"(?:(?P<persona>.+)-assistant|locomo-(?P<sample>.+)|lme-(?P<question>.+))-\w+")

# A scorer: each candidate's score (the one `threshold` cuts on), in the candidates' order.
Scorer = Callable[["Search"], Sequence[float]]


@dataclass
class Search:
    """One recorded search: its query's analysis and its candidates' signals and metadata."""

    user: str
    question: str
    query: Query
    signals: list[scoring.Signals]
    metadata: list[dict[str, Any]]


@dataclass
class Judged:
    """A search with its labels: `relevant` per candidate (True, False, or None: neither, a fact
    an off-topic question may cite); `ids` per candidate (what it holds: a fact, a turn, turns)
    and `evidence` (the ids that answer; empty when nothing in the scope does)."""

    set: str
    search: Search
    relevant: list[bool | None]
    ids: list[frozenset[Any]]
    evidence: frozenset[Any]
    named: bool = False  # an assistant question naming the user
    off_topic: bool = False  # nothing in the scope answers it (judged: nothing returned)
    figures: dict[str, float] = field(default_factory=dict)

    @property
    def answerable(self) -> bool:
        return bool(self.evidence)


def recorded(path: Path) -> Iterator[Search]:
    """The recording's searches, one line at a time (a run of the six sets is about 200 MB)."""
    seen: set[tuple[str, str]] = set()
    with path.open() as lines:
        for line in lines:
            record = json.loads(line)
            candidates = record["candidates"]
            if not candidates:
                continue
            q = record["query"]
            key = (q["text"], candidates[0]["memory"]["user_id"])
            if key in seen or q["text"] == "warm up":
                continue
            seen.add(key)
            query = Query(
                text=q["text"],
                vector="",
                names=tuple(q["names"]),
                word_vectors=None,
                window=None,
                keywords=q["keywords"],
                language=q.get("language", ""),
                typical=q["typical"],
                model=q["model"],
            )
            signals = [
                scoring.Signals(**{**c["signals"], "entities": tuple(c["signals"]["entities"])})
                for c in candidates
            ]
            metadata = [c["memory"]["metadata"] or {} for c in candidates]
            yield Search(key[1], q["text"], query, signals, metadata)


class Labeller:
    """Labels searches by the data sets' questions (read once)."""

    def __init__(self) -> None:
        self.personas: dict[str, tuple[str, dict[str, Any]]] = {}
        for name, paths in PERSONA_SETS.items():
            for path in paths:
                for persona in json.loads(path.read_text())["personas"]:
                    self.personas[persona["user_id"]] = (name, persona)
        self.locomo = {
            s["sample_id"]: {
                q["question"]: frozenset(evidence_ids(q["evidence"]))
                for q in s["qa"]
                if q.get("category") in (1, 2, 3, 4)
            }
            for s in json.loads((SHARED / "locomo-dev.json").read_text())
        }
        self.locomo_asked = {q for sample in self.locomo.values() for q in sample}
        self.lme = {
            q["question_id"]: q
            for q in json.loads((SHARED / "longmemeval-dev.json").read_text())["questions"]
        }
        self.lme_asked = {q["question"] for q in self.lme.values()}

    def judge(self, search: Search) -> Judged | None:
        match = SCOPES.fullmatch(search.user)
        if match is None:
            return None
        if match["persona"] is not None:
            return self._persona(search, match["persona"])
        if match["sample"] is not None:
            return self._locomo(search, match["sample"])
        return self._lme(search, match["question"])

    def _persona(self, search: Search, user: str) -> Judged | None:
        if user not in self.personas:
            return None
        name, persona = self.personas[user]
        ids = [frozenset({m.get("fact")}) for m in search.metadata]
        for item in persona["questions"]:
            if item["question"] == search.question:
                answers = frozenset(item["answers"])
                return Judged(
                    name,
                    search,
                    [bool(i & answers) for i in ids],
                    ids,
                    answers,
                    named=item["kind"] == "named",
                )
        for item in persona["off_topic"]:
            if item["question"] == search.question:
                cite = frozenset(item.get("cite") or ())
                relevant = [None if i & cite else False for i in ids]
                judged = Judged(name, search, relevant, ids, frozenset(), off_topic=not cite)
                return judged
        return None

    def _locomo(self, search: Search, sample: str) -> Judged | None:
        ids = [frozenset({m.get("dia_id")}) for m in search.metadata]
        evidence = self.locomo[sample].get(search.question)
        if evidence is None:
            if search.question not in self.locomo_asked:
                return None
            # Another conversation's question: nothing here is about it.
            return Judged("locomo", search, [False] * len(ids), ids, frozenset(), off_topic=True)
        return Judged("locomo", search, [bool(i & evidence) for i in ids], ids, evidence)

    def _lme(self, search: Search, question_id: str) -> Judged | None:
        question = self.lme[question_id]
        found = [identities({"metadata": m}) for m in search.metadata]
        ids = [frozenset(turns) for _, turns in found]
        if question["question"] != search.question:
            if search.question not in self.lme_asked:
                return None
            return Judged(
                "longmemeval", search, [False] * len(ids), ids, frozenset(), off_topic=True
            )
        evidence = frozenset(
            (s, t)
            for s, session in enumerate(question["haystack_sessions"])
            for t, turn in enumerate(session)
            if turn.get("has_answer")
        )
        relevant: list[bool | None] = [flag or bool(turns & evidence) for flag, turns in found]
        return Judged("longmemeval", search, relevant, ids, evidence)


def judged(path: Path) -> dict[str, list[Judged]]:
    """The recording's labelled searches by data set (those of no set left out)."""
    labeller = Labeller()
    sets: dict[str, list[Judged]] = {}
    for search in recorded(path):
        item = labeller.judge(search)
        if item is not None:
            sets.setdefault(item.set, []).append(item)
    return sets


def share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


# The figures of each kind of set, in the tables' order: (key, heading).
PERSONA_FIGURES = (
    ("returned", "answer returned"),
    ("first", "answer first"),
    ("named", "naming the user, answer first"),
    ("empty", "nothing to cite, nothing returned"),
)
LOCOMO_FIGURES = (
    ("recall", "recall@10"),
    ("mrr", "MRR"),
    ("kept", "evidence kept"),
    ("empty", "other conversation, nothing returned"),
)
LME_FIGURES = (
    ("mrr", "MRR"),
    ("all", "all-evidence recall@10"),
    ("kept", "evidence kept"),
    ("empty", "other scope, nothing returned"),
)


def figures_of(name: str) -> tuple[tuple[str, str], ...]:
    return {"locomo": LOCOMO_FIGURES, "longmemeval": LME_FIGURES}.get(name, PERSONA_FIGURES)


def measure(items: Sequence[Judged], scorer: Scorer, threshold: float) -> dict[str, float]:
    """One set's figures under `scorer`, as its benchmark computes them: the order at threshold
    0, top 10 (LongMemEval's MRR over its top 20); what `threshold` keeps of the evidence the top
    10 holds; the share of questions nothing answers that return nothing at `threshold`. The
    persona sets: the answer returned (in the top 10 at `threshold`) and first, over all their
    answerable questions and over those naming the user."""
    returned, first, named, recall, every, mrr, kept, empty = ([] for _ in range(8))
    found_all, found_kept = 0.0, 0.0
    for item in items:
        scores = list(scorer(item.search))
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        if not item.answerable:
            if item.off_topic:
                empty.append(not scores or max(scores) < threshold)
            continue
        top = order[:10]
        passed = [i for i in top if scores[i] >= threshold]
        hit_first = bool(order) and bool(item.relevant[order[0]])
        first.append(hit_first)
        if item.named:
            named.append(hit_first)
        returned.append(any(item.relevant[i] for i in passed))
        covered = frozenset().union(*(item.ids[i] for i in top))
        covered_kept = frozenset().union(*(item.ids[i] for i in passed))
        recall.append(len(item.evidence & covered) / len(item.evidence))
        every.append(item.evidence <= covered)
        # Both benchmarks' MRR is over their top 20.
        rank = next((n for n, i in enumerate(order[:20], 1) if item.relevant[i]), None)
        mrr.append(1 / rank if rank else 0.0)
        if item.set == "locomo":
            found_all += len(item.evidence & covered) / len(item.evidence)
            found_kept += len(item.evidence & covered_kept) / len(item.evidence)
        elif any(item.relevant[i] for i in top):
            kept.append(any(item.relevant[i] for i in passed))
    if items and items[0].set == "locomo":
        return {
            "recall": statistics.mean(recall),
            "mrr": statistics.mean(mrr),
            "kept": found_kept / found_all if found_all else float("nan"),
            "empty": share(empty),
            "questions": len(recall),
        }
    if items and items[0].set == "longmemeval":
        return {
            "mrr": statistics.mean(mrr),
            "all": share(every),
            "kept": share(kept),
            "empty": share(empty),
            "questions": len(mrr),
        }
    return {
        "returned": share(returned),
        "first": share(first),
        "named": share(named),
        "empty": share(empty),
        "kept": share(kept),
        "questions": len(first),
    }


def line(name: str, figures: dict[str, float]) -> str:
    """One set's figures on one line."""
    parts = ", ".join(f"{heading} {figures[key]:.3f}" for key, heading in figures_of(name))
    return f"{name} ({int(figures['questions'])} questions): {parts}"


def cell(name: str, figures: dict[str, float]) -> str:
    """One set's figures for a table's cell: the values in figures_of()'s order."""
    return " / ".join(f"{figures[key]:.3f}" for key, _ in figures_of(name))
