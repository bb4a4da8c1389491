"""Fit search's ranker and calibrator (memory.retrieval.scoring) from a recording of the benchmark
sets' searches (bench/record.py), judge them on searches no fit saw, and write the fitted file
engram serves.

    .venv/bin/python bench/fit_ranker.py RECORDING [--write | --output FILE]
        [--hold-out support] [--folds 5]

The labelled sets (bench/judging.py): the four assistant-style sets of bench/data/ and the
LoCoMo and LongMemEval dev files. One of them (--hold-out, support by default) is left out of
every fit, the shipped one included. The table gives, for each set:

  - served: the score of the ranker file engram serves now for the recording's model (on the
    sets that file was fitted on, in-sample);
  - leave one data set out: a fit on the other sets (never the held-out one): a kind of data
    no fit saw;
  - grouped k-fold: a fit on the other sets and on the other folds of this one, a fold being a
    scope (a persona, a LoCoMo conversation, a LongMemEval question): new conversations of a
    kind the fit has seen (the hidden LoCoMo half, a held-out LongMemEval sample). The held-out
    set has no such column: its figures are the final fit's, which never saw it.

The fit, per embedding model (the recording's searches are of one):

  1. the ranker: a logistic regression without intercept on pairs of one search's candidates,
     one relevant and one not (the difference of their scoring.FEATURES, both ways round: a
     linear RankNet), each search weighing the same within its set and each set the same;
  2. the calibrator: a logistic regression on scoring.CALIBRATION telling the evidence among
     each search's TOP candidates by that ranker from the best candidate of each question
     nothing in the scope answers (calibration_rows()), each set weighing the same; it must rise
     with the relevance;
  3. its intercept moved by the threshold's rule: the lowest at which the default threshold
     keeps scoring.KEEP of the evidence the top 10 holds at threshold 0 on each set fitted.

Features are standardised for the fit (regularisation C, the same for every feature) and the
coefficients written back in the features' own units. --write writes the final fit (every set
but the held-out one) to memory/retrieval/rankers/<model>.json, --output elsewhere; the same
recording gives the same file, byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from common import load_local_env

load_local_env()

import django  # noqa: E402

django.setup()

import judging  # noqa: E402
from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]  # noqa: E402

from memory.retrieval import scoring  # noqa: E402
from memory.retrieval import search as retrieval  # noqa: E402
from memory.search import DEFAULT_THRESHOLD  # noqa: E402

# The regularisation (sklearn's C, on standardised features).
C = 1.0

# The calibrator learns from each search's best this many candidates (by the ranker): what a
# threshold decides about; the long tail of a scope says little about it.
TOP = 10


@dataclass
class Prepared:
    """A judged search with its features computed once."""

    item: judging.Judged
    rows: np.ndarray  # candidates x FEATURES
    query: np.ndarray  # the query's CALIBRATION features after the first two
    relevant: np.ndarray  # 1, 0, or -1 (neither)


def prepare(items: Sequence[judging.Judged]) -> list[Prepared]:
    out = []
    for item in items:
        signals = item.search.signals
        names = frozenset(item.search.query.names)
        rows = np.array(scoring.features(signals, names), dtype=float)
        query = np.array(scoring.query_features(signals, item.search.query.typical))
        relevant = np.array([-1 if r is None else int(r) for r in item.relevant])
        out.append(Prepared(item, rows, query, relevant))
    return out


@dataclass(frozen=True)
class Fit:
    ranker: np.ndarray
    calibrator: np.ndarray
    intercept: float

    def logits(self, p: Prepared) -> np.ndarray:
        relevance = p.rows @ self.ranker
        cal = np.column_stack([relevance, np.broadcast_to(p.query, (len(relevance), 2))])
        return np.asarray(cal @ self.calibrator + self.intercept)

    def scorer(self, prepared: dict[int, Prepared], shift: float = 0.0) -> judging.Scorer:
        def score(search: judging.Search) -> Sequence[float]:
            z = self.logits(prepared[id(search)]) + shift
            return list(1.0 / (1.0 + np.exp(-np.clip(z, -60, 60))))

        return score


def fit_ranker(sets: dict[str, list[Prepared]]) -> np.ndarray:
    diffs, weights = [], []
    for items in sets.values():
        answerable = [p for p in items if (p.relevant == 1).any() and (p.relevant == 0).any()]
        for p in answerable:
            pos, neg = p.rows[p.relevant == 1], p.rows[p.relevant == 0]
            d = (pos[:, None, :] - neg[None, :, :]).reshape(-1, pos.shape[1])
            diffs.append(d)
            weights.append(np.full(len(d), 1.0 / (len(d) * len(answerable) * len(sets))))
    d = np.concatenate(diffs)
    w = np.concatenate(weights)
    scale = np.concatenate([p.rows for items in sets.values() for p in items]).std(0)
    scale[scale == 0] = 1.0
    x = np.concatenate([d / scale, -d / scale])
    y = np.concatenate([np.ones(len(d)), np.zeros(len(d))])
    model = LogisticRegression(C=C, fit_intercept=False, max_iter=1000)
    model.fit(x, y, sample_weight=np.concatenate([w, w]) * len(w))
    return np.asarray(model.coef_[0] / scale)


def calibration_rows(p: Prepared, ranker: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What the threshold decides about, in one search: the evidence among its TOP candidates by
    the ranker (to keep), or, for a question nothing in the scope answers, its best candidate
    (to drop). The other candidates of an answered question are its context, neither (fitted as
    irrelevant, they set the bar where deep evidence passes and off-topic questions with it:
    docs/benchmarks.md); a near miss's question, with facts it may cite, is left out."""
    relevance = p.rows @ ranker
    order = np.argsort(-relevance, kind="stable")
    if p.item.answerable:
        top = order[:TOP][p.relevant[order[:TOP]] == 1]
    elif p.item.off_topic:
        top = order[:1]
    else:
        top = order[:0]
    x = np.column_stack([relevance[top], np.broadcast_to(p.query, (len(top), 2))])
    return x, (p.relevant[top] == 1).astype(float)


def fit_calibrator(sets: dict[str, list[Prepared]], ranker: np.ndarray) -> tuple[np.ndarray, float]:
    xs, ys, ws = [], [], []
    for items in sets.values():
        rows = [calibration_rows(p, ranker) for p in items]
        count = sum(len(y) for _, y in rows)
        for x, y in rows:
            xs.append(x)
            ys.append(y)
            ws.append(np.full(len(y), 1.0 / (count * len(sets))))
    x, y, w = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    mean, scale = x.mean(0), x.std(0)
    scale[scale == 0] = 1.0
    model = LogisticRegression(C=C, max_iter=1000)
    model.fit((x - mean) / scale, y, sample_weight=w * len(w))
    coef = model.coef_[0] / scale
    intercept = float(model.intercept_[0] - (model.coef_[0] * mean / scale).sum())
    if coef[0] <= 0:
        raise SystemExit("the calibrator falls with the relevance: the fit is not usable")
    return coef, intercept


def kept_share(
    items: list[Prepared], fit: Fit, shift: float, prepared: dict[int, Prepared]
) -> float:
    figures = judging.measure(
        [p.item for p in items], fit.scorer(prepared, shift), DEFAULT_THRESHOLD
    )
    return figures["kept"]


def placed(sets: dict[str, list[Prepared]], fit: Fit, prepared: dict[int, Prepared]) -> Fit:
    """The fit with its intercept moved to the lowest bar that keeps scoring.KEEP on every set."""
    shift = -30.0
    for items in sets.values():
        low, high = shift, 30.0  # kept_share rises with the shift
        if kept_share(items, fit, low, prepared) >= scoring.KEEP:
            continue
        for _ in range(40):
            mid = (low + high) / 2
            if kept_share(items, fit, mid, prepared) >= scoring.KEEP:
                high = mid
            else:
                low = mid
        shift = high
    return Fit(fit.ranker, fit.calibrator, fit.intercept + shift)


def fit(sets: dict[str, list[Prepared]], prepared: dict[int, Prepared]) -> Fit:
    ranker = fit_ranker(sets)
    calibrator, intercept = fit_calibrator(sets, ranker)
    return placed(sets, Fit(ranker, calibrator, intercept), prepared)


def rounded(values: Sequence[float] | np.ndarray) -> list[float]:
    return [float(f"{v:.8g}") for v in values]


def fitted_file(fit: Fit, model: str, sets: dict[str, list[Prepared]], command: str) -> str:
    data: dict[str, Any] = {
        "model": model,
        "command": command,
        "fitted_on": {name: len(items) for name, items in sets.items()},
        "regularisation": C,
        "calibrated_on_top": TOP,
        "features": list(scoring.FEATURES),
        "ranker": rounded(fit.ranker),
        "calibration": list(scoring.CALIBRATION),
        "calibrator": rounded(fit.calibrator),
        "intercept": rounded([fit.intercept])[0],
    }
    return json.dumps(data, indent=2) + "\n"


def fold_of(item: judging.Judged, folds: int) -> int:
    """The fold of a search's scope (a persona, a conversation, a question), by a stable hash."""
    match = judging.SCOPES.fullmatch(item.search.user)
    scope = (match and (match["persona"] or match["sample"] or match["question"])) or ""
    return zlib.crc32(scope.encode()) % folds


def scored(
    items: list[Prepared], fits: dict[int, Fit], prepared: dict[int, Prepared], fold: Any
) -> dict[str, float]:
    """A set's figures, each search scored by the fit of its fold."""
    scorers = {k: fit.scorer(prepared) for k, fit in fits.items()}
    return judging.measure(
        [p.item for p in items],
        lambda search: scorers[fold(prepared[id(search)])](search),
        DEFAULT_THRESHOLD,
    )


def today(search: judging.Search) -> Sequence[float]:
    """The served score (memory.retrieval.search.score_candidates)."""
    return [s.score for s in retrieval.score_candidates(search.signals, search.query)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("recording", type=Path)
    parser.add_argument("--hold-out", default="support", choices=judging.SETS)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="write the served file")
    parser.add_argument("--output", type=Path, help="write the final fit there instead")
    args = parser.parse_args()
    judged = judging.judged(args.recording)
    models = {item.search.query.model for items in judged.values() for item in items}
    if len(models) != 1:
        sys.exit(f"the recording holds searches of {len(models)} embedding models; record one")
    model = models.pop()
    sets = {name: prepare(judged[name]) for name in judging.SETS if name in judged}
    prepared = {id(p.item.search): p for items in sets.values() for p in items}
    print(f"command: bench/fit_ranker.py {' '.join(sys.argv[1:])}")
    print(f"model: {model}; searches: " + ", ".join(f"{n} {len(s)}" for n, s in sets.items()))
    fitted = {n: s for n, s in sets.items() if n != args.hold_out}
    final = fit(fitted, prepared)
    serving = scoring.ranker_file(scoring.DEFAULT_RANKER).exists()
    print("| set | figures | served | leave one data set out | grouped k-fold |")
    print("| --- | --- | --- | --- | --- |")
    for name, items in sets.items():
        heads = " / ".join(h for _, h in judging.figures_of(name))
        served = (
            judging.measure([p.item for p in items], today, DEFAULT_THRESHOLD) if serving else None
        )
        if name == args.hold_out:
            lodo, grouped = scored(items, {0: final}, prepared, lambda p: 0), None
        else:
            others = {n: s for n, s in fitted.items() if n != name}
            lodo = scored(items, {0: fit(others, prepared)}, prepared, lambda p: 0)
            fits = {
                k: fit(
                    {**others, name: [p for p in items if fold_of(p.item, args.folds) != k]},
                    prepared,
                )
                for k in range(args.folds)
            }
            grouped = scored(items, fits, prepared, lambda p: fold_of(p.item, args.folds))
        cells = [judging.cell(name, served) if served else "(none)", judging.cell(name, lodo)]
        cells.append(judging.cell(name, grouped) if grouped else "(held out)")
        print(f"| {name} | {heads} | {' | '.join(cells)} |")
    path = args.output or (scoring.ranker_file(model) if args.write else None)
    if path:
        path.write_text(
            fitted_file(
                final,
                model,
                fitted,
                "bench/fit_ranker.py RECORDING",
            )
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
