"""Retrieval quality on LoCoMo, through the public API.

Every dialog turn is stored raw (infer=false) as "[<session date>] <speaker>: <text>", one user id
per conversation, one add request per session (so a turn's neighbours are its context), or with
--per-turn one add request per turn (no neighbours, no shared request), with its turn id (dia_id)
written into the memory's metadata. Once the worker has linked every stored turn to its entities
(it waits for the worker's `entities` queue to drain, reading it through DATABASE_URL), every
question of categories 1-4 is a search in that user's scope; a hit is a returned memory whose
turn id is in the question's evidence. Prints recall@1/5/10/20 and MRR per category and overall,
and search latency (p50/p95/p99); at the end the run summary (common.RunSummary): turns stored
and searches per second, and the peak RSS of the client, web server, worker and postgres.

--calibration also prints, for a few fixed score thresholds, the precision and recall of the
results kept, and how often a question's best score reaches the threshold in its own conversation
against in the next one (where nothing is evidence): the scores are meant to compare across
queries.

--also-host URL (repeatable) evaluates the same stored turns again through another server on the
same database, e.g. one running the previous commit, and prints a table per server, and for how many questions each
server's results (ids, in order) are identical to the first server's. Each question goes to every
server in turn (the order rotating), so their latencies are measured under the same conditions.

    make run   # in another terminal (or any engram URL + key)
    .venv/bin/python bench/locomo.py [--data ../shared/data/locomo-dev.json] [--host URL --api-key KEY]
        [--per-turn] [--calibration] [--also-host URL ...] [--keep | --reuse RUN]

--keep leaves the stored turns in place and prints the run's id; --reuse RUN searches the turns
a kept run stored (no ingest), e.g. to time search again after a change to the server.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import (
    ROOT,
    Api,
    RunSummary,
    default_host,
    default_key,
    fmt_ms,
    percentiles,
    wait_for_entity_linking,
)

KS = (1, 5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def session_time(text: str) -> int | None:
    """'1:56 pm on 8 May, 2023' -> unix seconds (UTC)."""
    try:
        moment = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(moment.timestamp())


def evidence_ids(raw: list[str]) -> set[str]:
    ids = set()
    for item in raw:
        for part in re.split(r"[;,\s]+", item):
            match = re.fullmatch(r"D:?(\d+):0*(\d+)", part.strip())
            if match:
                ids.add(f"D{int(match.group(1))}:{int(match.group(2))}")
    return ids


def ingest(
    api: Api, sample: dict[str, Any], user_id: str, *, per_turn: bool = False
) -> tuple[int, list[float]]:
    conversation = sample["conversation"]
    stored, timings = 0, []
    sessions = sorted(
        (int(k.split("_")[1]) for k in conversation if re.fullmatch(r"session_\d+", k)),
    )
    for number in sessions:
        turns = conversation[f"session_{number}"]
        date = conversation.get(f"session_{number}_date_time", "")
        if per_turn:
            for turn in turns:
                one: dict[str, Any] = {
                    "messages": [
                        {"role": "user", "content": f"[{date}] {turn['speaker']}: {turn['text']}"}
                    ],
                    "user_id": user_id,
                    "infer": False,
                    "metadata": {"dia_id": turn["dia_id"], "session": number},
                }
                if (ts := session_time(date)) is not None:
                    one["timestamp"] = ts
                result, elapsed = api.call("POST", "/v3/memories/add/", json=one)
                timings.append(elapsed)
                stored += sum(1 for r in result["results"] if r["event"] == "ADD")
            continue
        messages = [
            {"role": "user", "content": f"[{date}] {t['speaker']}: {t['text']}"} for t in turns
        ]
        body: dict[str, Any] = {"messages": messages, "user_id": user_id, "infer": False}
        if (ts := session_time(date)) is not None:
            body["timestamp"] = ts
        result, elapsed = api.call("POST", "/v3/memories/add/", json=body)
        timings.append(elapsed)
        updates = [
            {"memory_id": r["id"], "metadata": {"dia_id": t["dia_id"], "session": number}}
            for r, t in zip(result["results"], turns, strict=True)
            if r["event"] == "ADD"
        ]
        if updates:
            api.call("PUT", "/v1/batch/", json={"memories": updates})
        stored += len(updates)
    return stored, timings


class Calibration:
    """How well a fixed score threshold separates relevant results from the rest: every
    returned (score, is evidence) pair, the evidence count, each question's top 10 (score, is
    evidence) with its evidence count, and each question's best score in its own conversation
    and in another one (where nothing is relevant). `r@10 kept` is recall@10 with that
    threshold against recall@10 with threshold 0 (the API's threshold cuts on the score alone,
    so cutting the threshold-0 results is what it returns); `other empty` is the share of
    questions asked in another conversation that return nothing."""

    THRESHOLDS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

    def __init__(self) -> None:
        self.pairs: list[tuple[float, bool]] = []
        self.evidence = 0
        self.top10: list[tuple[list[tuple[float, bool]], int]] = []
        self.own_best: list[float] = []
        self.foreign_best: list[float] = []

    def recall_at_10(self, threshold: float) -> float:
        return sum(
            sum(relevant for score, relevant in top if score >= threshold) / evidence
            for top, evidence in self.top10
        )

    def report(self) -> None:
        print(f"-- calibration: {len(self.own_best)} questions, {self.evidence} evidence turns")
        print(f"{'threshold':>9}{'kept':>8}{'precision':>11}{'recall':>8}{'r@10 kept':>11}"
              f"{'own best>=':>12}{'other empty':>13}")  # fmt: skip
        everything = self.recall_at_10(0.0)
        for t in self.THRESHOLDS:
            kept = [relevant for score, relevant in self.pairs if score >= t]
            own = sum(b >= t for b in self.own_best) / max(1, len(self.own_best))
            other = sum(b < t for b in self.foreign_best) / max(1, len(self.foreign_best))
            precision = sum(kept) / len(kept) if kept else 0.0
            ratio = self.recall_at_10(t) / everything if everything else 0.0
            print(f"{t:>9.2f}{len(kept):>8}{precision:>11.3f}{sum(kept) / self.evidence:>8.3f}"
                  f"{ratio:>11.3f}{own:>12.3f}{other:>13.3f}")  # fmt: skip


@dataclass
class Run:
    """One server's searches: its scores per category, latencies and calibration."""

    host: str
    api: Api
    calibration: Calibration | None
    scores: dict[Any, dict[str, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    latencies: list[float] = field(default_factory=list)
    # Each question's results (memory ids, best first), in the order asked.
    rankings: list[list[str]] = field(default_factory=list)


def evaluate(runs: list[Run], sample: dict[str, Any], user_id: str, other_user: str) -> None:
    """Ask the sample's questions in its user's scope, each question of every server in turn,
    the order rotating per question, so the servers share the machine's state alike."""
    questions = [
        (qa, evidence_ids(qa.get("evidence", [])))
        for qa in sample["qa"]
        if qa.get("category") in CATEGORIES
    ]
    for index, (qa, evidence) in enumerate(q for q in questions if q[1]):
        rotation = index % len(runs)
        for run in runs[rotation:] + runs[:rotation]:
            ask(run, qa, evidence, user_id, other_user)


def ask(run: Run, qa: dict[str, Any], evidence: set[str], user_id: str, other_user: str) -> None:
    body = {
        "query": qa["question"],
        "filters": {"user_id": user_id},
        "top_k": max(KS),
        "threshold": 0,
    }
    result, elapsed = run.api.call("POST", "/v3/memories/search/", json=body)
    run.latencies.append(elapsed)
    run.rankings.append([r["id"] for r in result["results"]])
    ranked = [(r.get("metadata") or {}).get("dia_id") for r in result["results"]]
    calibration = run.calibration
    if calibration is not None:
        found = [
            (float(r["score"]), d in evidence)
            for r, d in zip(result["results"], ranked, strict=True)
        ]
        calibration.pairs += found
        calibration.evidence += len(evidence)
        calibration.top10.append((found[:10], len(evidence)))
        calibration.own_best.append(found[0][0] if found else 0.0)
        elsewhere, _ = run.api.call(
            "POST", "/v3/memories/search/", json={**body, "filters": {"user_id": other_user}}
        )
        calibration.foreign_best.append(
            max((float(r["score"]) for r in elsewhere["results"]), default=0.0)
        )
    row = {f"r@{k}": len(evidence & set(ranked[:k])) / len(evidence) for k in KS}
    first = next((i for i, d in enumerate(ranked, 1) if d in evidence), None)
    row["mrr"] = 1 / first if first else 0.0
    for key in (qa["category"], "all"):
        for metric, value in row.items():
            run.scores[key][metric].append(value)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo-dev.json"))
    parser.add_argument("--host", default=default_host())
    parser.add_argument("--api-key", default=default_key())
    parser.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--per-turn", action="store_true", help="one add request per turn")
    parser.add_argument(
        "--also-host",
        action="append",
        default=[],
        help="also evaluate through this server (e.g. the previous commit's); repeatable",
    )
    parser.add_argument(
        "--calibration",
        action="store_true",
        help="also report precision/recall of fixed score thresholds, and each question's best "
        "score in its own conversation against in another one (one more search per question)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the stored turns (see --reuse)")
    parser.add_argument("--reuse", metavar="RUN", help="search a kept run's turns, storing none")
    return parser.parse_args()


def search_all(runs: list[Run], data: list[Any], users: list[str], summary: RunSummary) -> None:
    """Warm every server up, then ask every question of every server (timed as one phase)."""
    for server in runs:
        for _ in range(20):  # each web worker loads the embedding model on its first search
            body = {"query": "warm up", "filters": {"user_id": users[0]}}
            server.api.call("POST", "/v3/memories/search/", json=body)
    before = sum(server.api.calls for server in runs)
    with summary.phase(f"search (HTTP, {len(runs)} server(s) in turn)", "searches") as searched:
        for index, (sample, user_id) in enumerate(zip(data, users, strict=True)):
            evaluate(runs, sample, user_id, users[(index + 1) % len(users)])
        searched.count = sum(server.api.calls for server in runs) - before


def main() -> None:
    args = parse_args()
    if not args.api_key:
        sys.exit("No API key: run `make run` first, or pass --api-key / set ENGRAM_API_KEY.")
    data = json.loads(Path(args.data).read_text())
    if args.limit:
        data = data[: args.limit]
    api = Api(args.host, args.api_key)
    run = args.reuse or uuid.uuid4().hex[:8]
    add_times: list[float] = []
    hosts = [args.host, *args.also_host]
    summary = RunSummary.start(*hosts)
    started = time.perf_counter()
    users = [f"locomo-{sample['sample_id']}-{run}" for sample in data]
    turns = 0
    if not args.reuse:
        with summary.phase("ingest (add, infer=false)", "turns") as ingest:
            turns = ingest.count = store(api, data, users, add_times, per_turn=args.per_turn)
        summary.add("ingest (add, infer=false)", len(add_times), ingest.seconds, "requests")
    wait_for_entity_linking()
    print(f"command: {' '.join(sys.argv)}")
    print(
        f"data: {args.data} — {len(data)} conversations, {turns} turns stored "
        f"({'one add per turn' if args.per_turn else 'one add per session'})"
        + (f", stored by run {run}" if args.reuse else "")
    )
    calibrate = args.calibration and len(users) > 1  # another conversation to ask in
    runs = [
        Run(host, Api(host, args.api_key), Calibration() if calibrate else None) for host in hosts
    ]
    search_all(runs, data, users, summary)
    for server in runs:
        report(server.host, server.scores, server.latencies)
        if server.calibration is not None:
            server.calibration.report()
    for server in runs[1:]:
        same = sum(a == b for a, b in zip(runs[0].rankings, server.rankings, strict=True))
        print(
            f"rankings of {server.host} identical to {runs[0].host}'s: "
            f"{same} of {len(server.rankings)} questions"
        )
    if args.keep or args.reuse:
        print(f"stored turns kept: --reuse {run}")
    else:
        for user_id in users:
            api.call("DELETE", "/v1/memories/", params={"user_id": user_id})
    unit = "turn" if args.per_turn else "session"
    if add_times:
        print(
            f"add latency per {unit} (infer=false): {fmt_ms(percentiles(add_times))} "
            f"over {len(add_times)}"
        )
    print(f"total {time.perf_counter() - started:.0f}s")
    summary.report()


def store(
    api: Api, data: list[Any], users: list[str], add_times: list[float], *, per_turn: bool
) -> int:
    """Store every conversation's turns in its user's scope; returns how many were stored."""
    turns = 0
    for sample, user_id in zip(data, users, strict=True):
        stored, timings = ingest(api, sample, user_id, per_turn=per_turn)
        turns += stored
        add_times += timings
    return turns


def report(label: str, scores: dict[Any, dict[str, list[float]]], latencies: list[float]) -> None:
    print(f"-- {label}: {len(scores['all']['mrr'])} questions (categories 1-4)")
    header = (
        f"{'category':<14}{'n':>5}" + "".join(f"{'r@' + str(k):>8}" for k in KS) + f"{'MRR':>8}"
    )
    print(header)
    for key in [*CATEGORIES, "all"]:
        rows = scores.get(key)
        if not rows:
            continue
        name = CATEGORIES.get(key, "overall") if key != "all" else "overall"
        cells = "".join(f"{sum(rows[f'r@{k}']) / len(rows[f'r@{k}']):8.3f}" for k in KS)
        print(f"{name:<14}{len(rows['mrr']):>5}{cells}{sum(rows['mrr']) / len(rows['mrr']):8.3f}")
    print(
        f"search latency (HTTP, incl. query embedding): {fmt_ms(percentiles(latencies))} over {len(latencies)}"
    )


if __name__ == "__main__":
    main()
