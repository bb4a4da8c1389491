"""Searches recorded by bench/record.py, scored again: what a change to the scoring's constants
does on every benchmark set, in seconds, without storing or searching again.

Each recorded search is scored through engram's own scoring (memory.retrieval.search.
score_candidates, scoring.fuse) after the constants named by --set are changed in
memory.retrieval.scoring, and judged as its benchmark judges it. A search is told apart by its
scope's user id (as the benchmarks name them) and its question:

  - bench/assistant.py (`<persona>-assistant-<run>`): questions naming the user with the answer
    first (threshold 0), recall@10 kept at the threshold (against threshold 0), and the
    off-topic questions with nothing to cite that return nothing at the threshold, per data set;
  - bench/locomo.py (`locomo-<sample>-<run>`): recall@10 and MRR (threshold 0), evidence kept at
    the threshold, and another conversation's questions that return nothing there;
  - bench/longmemeval.py (`lme-<question>-<run>`): MRR and all-evidence recall@10 (threshold 0),
    evidence kept, and another question's scope returning nothing.

The candidates are those the recorded search scored (each signal's best 30, or top_k if more),
so a constant that changes which memories are candidates (SEMANTIC_CANDIDATES, ...) or how a
signal is computed before scoring cannot be replayed. A search recorded twice (the benchmarks
ask at several thresholds) counts once.

    .venv/bin/python bench/replay.py RECORDING [--set NAME=VALUE ...] [--threshold T]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import ROOT, load_local_env
from locomo import KS, evidence_ids
from longmemeval import TOP_K, identities

load_local_env()

import django  # noqa: E402

django.setup()

from memory.retrieval import scoring  # noqa: E402
from memory.retrieval import search as retrieval  # noqa: E402
from memory.search import DEFAULT_THRESHOLD  # noqa: E402
from memory.text.query import Query  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
ASSISTANT = [
    ROOT / "bench" / "data" / "assistant.json",
    ROOT / "bench" / "data" / "assistant-heldout.json",
]
SCOPES = re.compile(r"(?:(?P<persona>.+)-assistant|locomo-(?P<sample>.+)|lme-(?P<question>.+))-\w+")


@dataclass
class Search:
    user: str
    question: str
    query: Query
    signals: list[scoring.Signals]
    metadata: list[dict[str, Any]]

    @cached_property
    def scored(self) -> list[tuple[float, dict[str, Any]]]:
        """Each candidate's score under the constants as changed, and its metadata, best first."""
        scores = [s.score for s in retrieval.score_candidates(self.signals, self.query)]
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        return [(scores[i], self.metadata[i]) for i in order]

    def ranked(self, threshold: float) -> list[dict[str, Any]]:
        """The metadata of the memories returned at `threshold`, best first."""
        return [meta for score, meta in self.scored if score >= threshold]


def recorded(path: Path) -> Iterator[Search]:
    """The recording's searches, one line at a time (a run of the four sets is about 160 MB)."""
    seen: set[tuple[str, str]] = set()
    with path.open() as lines:
        for line in lines:
            record = json.loads(line)
            candidates = record["candidates"]
            if not candidates:
                continue
            q = record["query"]
            key = (q["text"], candidates[0]["memory"]["user_id"])
            if key in seen:
                continue
            seen.add(key)
            query = Query(
                text=q["text"],
                vector="",
                names=tuple(q["names"]),
                word_vectors=None,
                window=None,
                keywords=q["keywords"],
                typical=q["typical"],
                model=q["model"],
            )
            signals = [
                scoring.Signals(**{**c["signals"], "entities": tuple(c["signals"]["entities"])})
                for c in candidates
            ]
            metadata = [c["memory"]["metadata"] or {} for c in candidates]
            yield Search(key[1], q["text"], query, signals, metadata)


def share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


def assistant(searches: list[Search], path: Path, threshold: float) -> str | None:
    personas = {p["user_id"]: p for p in json.loads(path.read_text())["personas"]}
    named, kept, empty = [], [], []
    for search in searches:
        persona = personas.get(SCOPES.fullmatch(search.user)["persona"])  # type: ignore[index]
        if persona is None:
            continue
        for item in persona["questions"]:
            if item["question"] == search.question:
                answers = set(item["answers"])
                first = [m.get("fact") for m in search.ranked(0.0)[:10]]
                if item["kind"] == "named":
                    named.append(bool(first) and first[0] in answers)
                if answers & set(first):
                    kept.append(
                        bool(answers & {m.get("fact") for m in search.ranked(threshold)[:10]})
                    )
        unanswered = (q["question"] for q in persona["off_topic"] if not q.get("cite"))
        if search.question in unanswered:
            empty.append(not search.ranked(threshold))
    if not (named or empty):
        return None  # none of this set's searches were recorded
    return (
        f"{path.name}: named, answer first {share(named):.3f} ({len(named)}); recall@10 kept "
        f"{share(kept):.3f}; nothing to cite, nothing returned {share(empty):.3f} ({len(empty)})"
    )


def locomo(searches: list[Search], threshold: float) -> str:
    data = json.loads((SHARED / "locomo-dev.json").read_text())
    questions = {
        s["sample_id"]: {
            q["question"]: evidence_ids(q["evidence"])
            for q in s["qa"]
            if q.get("category") in (1, 2, 3, 4)
        }
        for s in data
    }
    recall, at, mrr, other = [], [], [], []
    asked = {question for sample in questions.values() for question in sample}
    for search in searches:
        evidence = questions[SCOPES.fullmatch(search.user)["sample"]].get(search.question)  # type: ignore[index]
        if evidence is None:
            if search.question in asked:  # another conversation's question, not a warm-up
                other.append(not search.ranked(threshold))
            continue
        ranked = [m.get("dia_id") for m in search.ranked(0.0)[: max(KS)]]
        recall.append(len(evidence & set(ranked[:10])) / len(evidence))
        at.append(
            len(evidence & {m.get("dia_id") for m in search.ranked(threshold)[:10]}) / len(evidence)
        )
        first = next((i for i, d in enumerate(ranked, 1) if d in evidence), None)
        mrr.append(1 / first if first else 0.0)
    return (
        f"LoCoMo: recall@10 {statistics.mean(recall):.3f}, MRR {statistics.mean(mrr):.3f} "
        f"({len(recall)}); evidence kept {sum(at) / sum(recall):.3f}; another conversation's, "
        f"nothing returned {share(other):.3f} ({len(other)})"
    )


def longmemeval(searches: list[Search], threshold: float) -> str:
    data = {
        q["question_id"]: q
        for q in json.loads((SHARED / "longmemeval-dev.json").read_text())["questions"]
    }
    kept, every, mrr, other = [], [], [], []
    asked = {q["question"] for q in data.values()}
    for search in searches:
        question = data[SCOPES.fullmatch(search.user)["question"]]  # type: ignore[index]
        if question["question"] != search.question:
            if search.question in asked:  # another question's, not a warm-up
                other.append(not search.ranked(threshold))
            continue
        evidence = {
            (s, t)
            for s, session in enumerate(question["haystack_sessions"])
            for t, turn in enumerate(session)
            if turn.get("has_answer")
        }
        found = [identities({"metadata": m}) for m in search.ranked(0.0)[:TOP_K]]
        hits = [flag or bool(turns & evidence) for flag, turns in found]
        covered = set().union(*(turns for _, turns in found[:10]))
        every.append(evidence <= covered)
        first = next((i for i, hit in enumerate(hits, 1) if hit), None)
        mrr.append(1 / first if first else 0.0)
        if any(hits[:10]):
            at = [identities({"metadata": m}) for m in search.ranked(threshold)[:10]]
            kept.append(any(flag or bool(turns & evidence) for flag, turns in at))
    return (
        f"LongMemEval: MRR {statistics.mean(mrr):.3f}, all-evidence recall@10 "
        f"{share(every):.3f} ({len(mrr)}); evidence kept {share(kept):.3f}; another question's "
        f"scope, nothing returned {share(other):.3f} ({len(other)})"
    )


def override(assignments: list[str]) -> None:
    for assignment in assignments:
        name, _, value = assignment.partition("=")
        current = getattr(scoring, name, None)
        if not isinstance(current, int | float):
            sys.exit(f"--set {assignment}: memory.retrieval.scoring has no numeric constant {name}")
        try:
            changed = type(current)(value)
        except ValueError:
            sys.exit(f"--set {assignment}: {name} takes a {type(current).__name__}")
        # search imports some of scoring's constants by name (ENTITY_WEIGHT): its copy too.
        for module in (scoring, retrieval):
            if getattr(module, name, None) is current:
                setattr(module, name, changed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("recording", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    args = parser.parse_args()
    override(args.set)
    groups: dict[str, list[Search]] = {"persona": [], "sample": [], "question": []}
    for search in recorded(args.recording):
        match = SCOPES.fullmatch(search.user)
        if match:
            groups[match.lastgroup or ""].append(search)
    print(f"command: bench/replay.py {' '.join(sys.argv[1:])}")
    if groups["persona"]:
        for path in ASSISTANT:
            figures = assistant(groups["persona"], path, args.threshold)
            if figures:
                print(figures)
    if groups["sample"]:
        print(locomo(groups["sample"], args.threshold))
    if groups["question"]:
        print(longmemeval(groups["question"], args.threshold))


if __name__ == "__main__":
    main()
