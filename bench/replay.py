"""Searches recorded by bench/record.py, scored again: what a change to the scoring's constants
does on every benchmark set, in seconds, without storing or searching again.

Each recorded search is scored through engram's own scoring (memory.retrieval.search.
score_candidates, scoring.fuse) after the constants named by --set are changed in
memory.retrieval.scoring, and judged as its benchmark judges it (bench/judging.py: the labels
and figures bench/fit_ranker.py shares), on each set recorded: the four assistant-style sets
(the answer returned and first, over all questions and those naming the user; off-topic
questions with nothing to cite that return nothing), LoCoMo (recall@10, MRR, evidence kept at
the threshold, another conversation's questions returning nothing) and LongMemEval (MRR,
all-evidence recall@10, evidence kept, another question's scope returning nothing).

The candidates are those the recorded search scored (each signal's best 30, or top_k if more),
so a constant that changes which memories are candidates (SEMANTIC_CANDIDATES, ...) or how a
signal is computed before scoring cannot be replayed. A search recorded twice (the benchmarks
ask at several thresholds) counts once.

    .venv/bin/python bench/replay.py RECORDING [--set NAME=VALUE ...] [--threshold T]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import load_local_env

load_local_env()

import django  # noqa: E402

django.setup()

import judging  # noqa: E402

from memory.retrieval import scoring  # noqa: E402
from memory.retrieval import search as retrieval  # noqa: E402
from memory.search import DEFAULT_THRESHOLD  # noqa: E402


def replayed(search: judging.Search) -> list[float]:
    """Each candidate's score under the constants as changed (engram's own scoring)."""
    return [s.score for s in retrieval.score_candidates(search.signals, search.query)]


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
    sets = judging.judged(args.recording)
    print(f"command: bench/replay.py {' '.join(sys.argv[1:])}")
    for name in judging.SETS:
        if name in sets:
            print(judging.line(name, judging.measure(sets[name], replayed, args.threshold)))


if __name__ == "__main__":
    main()
