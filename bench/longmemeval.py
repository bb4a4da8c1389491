"""Retrieval quality on the LongMemEval dev file (../shared/data/longmemeval-dev.json), through
the public API.

Each question is its own scope (one user id per question, unique per run). Every user turn of
its haystack is stored raw (infer=false), one add request per session with the session's date as
`timestamp`, and its identity (question id, session position, turn position, has_answer)
written into the memory's metadata (PUT /v1/batch/); sessions are told apart by position, as a
few haystacks repeat a session id. Blank turns are skipped, turns over the API's text limit
(--max-text-chars, the server's ENGRAM_MAX_TEXT_CHARS) are truncated, and a session whose turns
could come to more than the request's embedding budget (--embed-budget, ENGRAM_MAX_EMBED_TOKENS:
each text costs at most 256 tokens, the model's window) or more than --max-messages
(ENGRAM_MAX_MESSAGES) is sent in several adds (a server with a smaller budget answers 400: the
add is then halved and sent again); the output counts each of these. A turn whose exact text is
already stored in the scope is not stored again: its identity is added to the existing memory's
metadata (`also`).

Once the worker has linked every stored turn to its entities (it waits for the worker's
`entities` queue to drain, reading it through DATABASE_URL), each question is a search in its
scope, POST /v3/memories/search/ with `reference_date` = the question's date, top_k 20 and
threshold 0. Prints per question type and overall: turn-level recall@5 and @10 (some evidence
turn in the top k), all-evidence recall@10 (every evidence turn in the top 10), MRR of the first
evidence turn, session-level recall@10 (an answer session among the top 10's sessions); search
latency and add latency (p50/p95/p99); at the end the run summary (common.RunSummary): memories
stored, add requests and searches per second, and the peak RSS of the client, web server, worker
and postgres.

--calibration also asks each question in the next question's scope (where nothing is evidence)
and prints both best scores' distribution and, at fixed thresholds and at the API's default
(`threshold` left out), the share of own-scope searches whose top 10 still holds an evidence
turn, the share of other-scope searches that return nothing, and the median number of results
(top_k 20): 21 more searches per question.

--also-host URL (repeatable) evaluates the same stored turns again through another server on the
same database (e.g. one running the previous commit) and prints a table per
server, and for how many questions each server's results (ids, in order) are identical to the
first server's. Each question goes to every server in turn (the order rotating).

At the end it erases its users (DELETE /v2/entities/user/<id>/), also after an error, unless
--keep: that leaves them in place and prints the run's id; --reuse RUN then searches the turns a
kept run stored (no ingest, about 13 minutes saved), e.g. to compare rankings after a change to
the server (its last erases them).

    make run   # in another terminal (or any engram URL + key)
    .venv/bin/python bench/longmemeval.py [--data ../shared/data/longmemeval-dev.json]
        [--host URL --api-key KEY] [--limit N] [--calibration] [--also-host URL ...]
        [--keep | --reuse RUN]
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

TOP_K = 20
TYPES = (
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
    "single-session-user",
    "single-session-preference",
)
METRICS = ("r@5", "r@10", "all@10", "mrr", "sess@10")
TEXT_WINDOW_TOKENS = 256  # the most tokens one text costs the embedding budget (the model's window)


def lme_time(text: str) -> datetime | None:
    """LongMemEval's '2023/05/30 (Tue) 23:40' -> that moment in UTC."""
    match = re.fullmatch(r"\s*(\d{4})/(\d\d)/(\d\d)\s*(?:\(\w+\))?\s*(\d\d):(\d\d)\s*", text or "")
    if not match:
        return None
    year, month, day, hour, minute = map(int, match.groups())
    try:
        return datetime(year, month, day, hour, minute, tzinfo=UTC)
    except ValueError:
        return None


@dataclass
class Limits:
    """The server's request limits the adds must respect (its defaults unless told)."""

    max_chars: int
    max_messages: int
    embed_budget: int


@dataclass
class Ingest:
    """What storing the haystacks did."""

    stored: int = 0  # memories created (ADD)
    duplicates: int = 0  # turns whose exact text the scope already held (NONE)
    blank: int = 0
    truncated: int = 0
    sessions: int = 0
    undated: int = 0
    split: int = 0  # sessions sent in more than one add
    adds: int = 0
    refused: list[str] = field(default_factory=list)  # 400s over the embedding budget
    add_times: list[float] = field(default_factory=list)
    unstored_evidence: int = 0


@dataclass
class Turn:
    session: int
    turn: int
    has_answer: bool
    text: str


def chunks(turns: list[Turn], limits: Limits) -> list[list[Turn]]:
    """`turns` in order, cut so that no add can exceed the message count or the embedding
    budget: a text costs at most its characters + 2 tokens ([CLS], [SEP]; a word piece is at
    least one character), and at most the model's window."""
    found: list[list[Turn]] = [[]]
    cost = 0
    for turn in turns:
        need = min(TEXT_WINDOW_TOKENS, len(turn.text) + 2)
        if found[-1] and (
            len(found[-1]) >= limits.max_messages or cost + need > limits.embed_budget
        ):
            found.append([])
            cost = 0
        found[-1].append(turn)
        cost += need
    return [c for c in found if c]


def send(api: Api, body: dict[str, Any], turns: list[Turn], ingest: Ingest) -> list[Any]:
    """Add `turns` in one request; halved and sent again if the server refuses it as over its
    embedding budget. The add results, one per turn."""
    messages = [{"role": "user", "content": t.text} for t in turns]
    try:
        result, elapsed = api.call("POST", "/v3/memories/add/", json={**body, "messages": messages})
    except RuntimeError as error:
        if "ENGRAM_MAX_EMBED_TOKENS" not in str(error) or len(turns) < 2:
            raise
        ingest.refused.append(f"{len(turns)} turns: {error}")
        half = len(turns) // 2
        return send(api, body, turns[:half], ingest) + send(api, body, turns[half:], ingest)
    ingest.adds += 1
    ingest.add_times.append(elapsed)
    return list(result["results"])


def store(api: Api, question: dict[str, Any], user_id: str, limits: Limits, ingest: Ingest) -> None:
    """Store the question's haystack in `user_id`'s scope, each turn's identity in metadata."""
    qid = question["question_id"]
    metadata: dict[str, dict[str, Any]] = {}  # memory id -> its metadata
    for position, (session, date) in enumerate(
        zip(question["haystack_sessions"], question["haystack_dates"], strict=True)
    ):
        ingest.sessions += 1
        turns = []
        for index, raw in enumerate(session):
            text = raw.get("content") or ""
            if not text.strip():
                ingest.blank += 1
                ingest.unstored_evidence += bool(raw.get("has_answer"))
                continue
            if len(text) > limits.max_chars:
                ingest.truncated += 1
                text = text[: limits.max_chars]
            turns.append(Turn(position, index, bool(raw.get("has_answer")), text))
        if not turns:
            continue
        body: dict[str, Any] = {"user_id": user_id, "infer": False}
        moment = lme_time(date)
        if moment is None:
            ingest.undated += 1
        else:
            body["timestamp"] = int(moment.timestamp())
        parts = chunks(turns, limits)
        ingest.split += len(parts) > 1
        for part in parts:
            results = send(api, body, part, ingest)
            touched: dict[str, dict[str, Any]] = {}
            for result, turn in zip(results, part, strict=True):
                if result["event"] == "ADD":
                    ingest.stored += 1
                    metadata[result["id"]] = {
                        "question_id": qid,
                        "session": turn.session,
                        "turn": turn.turn,
                        "has_answer": turn.has_answer,
                    }
                else:  # the same text stored earlier in this scope: it stands for this turn too
                    ingest.duplicates += 1
                    known = metadata.setdefault(result["id"], {"question_id": qid})
                    known.setdefault("also", []).append([turn.session, turn.turn])
                    known["has_answer"] = bool(known.get("has_answer")) or turn.has_answer
                touched[result["id"]] = metadata[result["id"]]
            updates = [{"memory_id": i, "metadata": m} for i, m in touched.items()]
            for start in range(0, len(updates), 1000):
                api.call("PUT", "/v1/batch/", json={"memories": updates[start : start + 1000]})


def identities(result: dict[str, Any]) -> tuple[bool, set[tuple[int, int]]]:
    """A search result's (has_answer, {(session position, turn position)}) from its metadata."""
    meta = result.get("metadata") or {}
    turns = {(int(s), int(t)) for s, t in meta.get("also", [])}
    if "session" in meta and "turn" in meta:
        turns.add((int(meta["session"]), int(meta["turn"])))
    return bool(meta.get("has_answer")), turns


def quartiles(samples: list[float]) -> list[float]:
    """min, p25, median, p75, max (nearest rank, as common.percentiles)."""
    if not samples:
        return [0.0] * 5
    ordered = sorted(samples)
    return [ordered[round(q * (len(ordered) - 1))] for q in (0, 0.25, 0.5, 0.75, 1)]


class Calibration:
    """How a score threshold separates a question's own scope (which holds its evidence) from
    another question's (which holds none): each question's best score in both, and at each
    threshold whether the own scope's top 10 still holds an evidence turn, whether the other
    scope returns nothing, and how many results each returns."""

    THRESHOLDS: tuple[float | None, ...] = (0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, None)

    def __init__(self) -> None:
        self.own_best: list[float] = []
        self.other_best: list[float] = []
        self.own_hit: dict[float | None, list[bool]] = defaultdict(list)
        self.own_count: dict[float | None, list[int]] = defaultdict(list)
        self.other_empty: dict[float | None, list[bool]] = defaultdict(list)
        self.other_count: dict[float | None, list[int]] = defaultdict(list)

    def report(self, label: str) -> None:
        n = len(self.own_best)
        print(
            f"-- calibration, {label}: {n} questions, each asked in its own scope and in the next "
            f"question's (no evidence there), top_k {TOP_K}"
        )
        print(f"{'best score':<14}" + "".join(f"{h:>8}" for h in ("min", "p25", "median", "p75", "max")))  # fmt: skip
        for name, samples in (("own scope", self.own_best), ("other scope", self.other_best)):
            print(f"{name:<14}" + "".join(f"{v:8.3f}" for v in quartiles(samples)))
        print(f"{'threshold':>10}{'own top-10 has evidence':>25}{'other returns nothing':>23}"
              f"{'median results own':>20}{'other':>7}")  # fmt: skip
        for t in self.THRESHOLDS:
            name = "default" if t is None else f"{t:.2f}"
            hit = sum(self.own_hit[t]) / max(1, len(self.own_hit[t]))
            empty = sum(self.other_empty[t]) / max(1, len(self.other_empty[t]))
            own = quartiles([float(c) for c in self.own_count[t]])[2]
            other = quartiles([float(c) for c in self.other_count[t]])[2]
            print(f"{name:>10}{hit:>25.3f}{empty:>23.3f}{own:>20.0f}{other:>7.0f}")


@dataclass
class Run:
    """One server's searches: its scores per question type, latencies and calibration."""

    host: str
    api: Api
    calibration: Calibration | None
    scores: dict[str, dict[str, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    latencies: list[float] = field(default_factory=list)
    # Each question's results (memory ids, best first), in the order asked.
    rankings: list[list[str]] = field(default_factory=list)
    foreign: int = 0  # results whose metadata names another question (should stay 0)


def ask(
    run: Run, question: dict[str, Any], user_id: str, other_user: str, undated: list[str]
) -> None:
    qid = question["question_id"]
    evidence = {
        (s, t)
        for s, session in enumerate(question["haystack_sessions"])
        for t, turn in enumerate(session)
        if turn.get("has_answer")
    }
    answers = set(question.get("answer_session_ids") or [])
    answer_sessions = {
        s for s, sid in enumerate(question["haystack_session_ids"]) if sid in answers
    }
    body: dict[str, Any] = {
        "query": question["question"],
        "filters": {"user_id": user_id},
        "top_k": TOP_K,
        "threshold": 0,
    }
    moment = lme_time(question.get("question_date", ""))
    if moment is not None:
        body["reference_date"] = moment.isoformat()
    elif qid not in undated:
        undated.append(qid)
    result, elapsed = run.api.call("POST", "/v3/memories/search/", json=body)
    run.latencies.append(elapsed)
    results = result["results"]
    run.rankings.append([r["id"] for r in results])
    run.foreign += sum((r.get("metadata") or {}).get("question_id") != qid for r in results)
    found = [identities(r) for r in results]
    hits = [flag or bool(turns & evidence) for flag, turns in found]
    covered = set().union(*(turns for _, turns in found[:10])) if found else set()
    sessions = {s for _, turns in found[:10] for s, _ in turns}
    first = next((i for i, hit in enumerate(hits, 1) if hit), None)
    row = {
        "r@5": float(any(hits[:5])),
        "r@10": float(any(hits[:10])),
        "all@10": float(evidence <= covered),
        "mrr": 1 / first if first else 0.0,
        "sess@10": float(bool(sessions & answer_sessions)),
    }
    for key in (question["question_type"], "all"):
        for metric, value in row.items():
            run.scores[key][metric].append(value)
    calibration = run.calibration
    if calibration is None:
        return
    calibration.own_best.append(max((float(r["score"]) for r in results), default=0.0))
    elsewhere = {**body, "filters": {"user_id": other_user}}
    for t in Calibration.THRESHOLDS:
        if t == 0:
            own = results
        else:
            own_body = {k: v for k, v in body.items() if k != "threshold"}
            if t is not None:
                own_body["threshold"] = t
            own = run.api.call("POST", "/v3/memories/search/", json=own_body)[0]["results"]
        other_body = {k: v for k, v in elsewhere.items() if k != "threshold"}
        if t is not None:
            other_body["threshold"] = t
        other_results = run.api.call("POST", "/v3/memories/search/", json=other_body)[0]["results"]
        if t == 0:
            calibration.other_best.append(
                max((float(r["score"]) for r in other_results), default=0.0)
            )
        own_hits = [flag or bool(turns & evidence) for flag, turns in map(identities, own)]
        calibration.own_hit[t].append(any(own_hits[:10]))
        calibration.own_count[t].append(len(own))
        calibration.other_empty[t].append(not other_results)
        calibration.other_count[t].append(len(other_results))


def report(run: Run) -> None:
    scores = run.scores
    print(f"-- {run.host}: {len(scores['all']['mrr'])} questions, top_k {TOP_K}, threshold 0")
    header = f"{'question type':<27}{'n':>5}" + "".join(f"{m:>9}" for m in METRICS)
    print(header)
    for key in [*TYPES, *sorted(k for k in scores if k not in TYPES and k != "all"), "all"]:
        rows = scores.get(key)
        if not rows:
            continue
        name = "overall" if key == "all" else key
        cells = "".join(f"{sum(rows[m]) / len(rows[m]):9.3f}" for m in METRICS)
        print(f"{name:<27}{len(rows['mrr']):>5}{cells}")
    print(
        f"search latency (HTTP, incl. query embedding): {fmt_ms(percentiles(run.latencies))} "
        f"over {len(run.latencies)}"
    )
    if run.foreign:
        print(f"WARNING: {run.foreign} results carried another question's metadata")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default=str(ROOT.parent / "shared" / "data" / "longmemeval-dev.json")
    )
    parser.add_argument("--host", default=default_host())
    parser.add_argument("--api-key", default=default_key())
    parser.add_argument("--limit", type=int, default=0, help="only the first N questions")
    parser.add_argument(
        "--also-host",
        action="append",
        default=[],
        help="also evaluate through this server (e.g. the previous commit's); repeatable",
    )
    parser.add_argument(
        "--calibration",
        action="store_true",
        help="also ask each question in the next question's scope, and at fixed thresholds "
        "(21 more searches per question and server)",
    )
    parser.add_argument(
        "--max-text-chars", type=int, default=20_000, help="the server's ENGRAM_MAX_TEXT_CHARS"
    )
    parser.add_argument(
        "--max-messages", type=int, default=500, help="the server's ENGRAM_MAX_MESSAGES"
    )
    parser.add_argument(
        "--embed-budget", type=int, default=6_144, help="the server's ENGRAM_MAX_EMBED_TOKENS"
    )
    parser.add_argument(
        "--link-timeout", type=float, default=3600, help="seconds to wait for entity linking"
    )
    reuse = parser.add_mutually_exclusive_group()
    reuse.add_argument("--keep", action="store_true", help="keep the stored turns (see --reuse)")
    reuse.add_argument("--reuse", metavar="RUN", help="search a kept run's turns, storing none")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if not args.api_key:
        sys.exit("No API key: run `make run` first, or pass --api-key / set ENGRAM_API_KEY.")
    path = Path(args.data)
    questions = json.loads(path.read_text())["questions"]
    if args.limit:
        questions = questions[: args.limit]
    limits = Limits(args.max_text_chars, args.max_messages, args.embed_budget)
    api = Api(args.host, args.api_key)
    run_id = args.reuse or uuid.uuid4().hex[:8]
    users = [f"lme-{q['question_id']}-{run_id}" for q in questions]
    ingest = Ingest()
    summary = RunSummary.start(args.host, *args.also_host)
    started = time.perf_counter()
    written: list[str] = []
    stored_after = 0.0
    try:
        if not args.reuse:
            with summary.phase("ingest (add, infer=false)", "memories") as stored:
                store_all(api, questions, users, limits, ingest, written)
                stored.count = ingest.stored
            stored_after = stored.seconds
            summary.add("ingest (add, infer=false)", ingest.adds, stored_after, "requests")
        wait_for_entity_linking(args.link_timeout)
        throttled = evaluate_all(args, questions, users, ingest, path, stored_after, summary)
        print(f"{api.throttled + throttled} requests throttled (429) and sent again")
    finally:
        if args.keep or args.reuse:
            print(f"stored turns kept: --reuse {run_id}")
            written = []
        for user_id in written:
            try:
                api.call("DELETE", f"/v2/entities/user/{user_id}/")
            except RuntimeError as error:
                print(f"could not erase {user_id}: {error}", file=sys.stderr)
        print(f"erased {len(written)} users; total {time.perf_counter() - started:.0f}s")
    summary.report()


def store_all(
    api: Api,
    questions: list[dict[str, Any]],
    users: list[str],
    limits: Limits,
    ingest: Ingest,
    written: list[str],
) -> None:
    """Store every question's haystack in its user's scope (each user noted in `written`)."""
    started = time.perf_counter()
    for number, (question, user_id) in enumerate(zip(questions, users, strict=True), 1):
        written.append(user_id)
        store(api, question, user_id, limits, ingest)
        if number % 10 == 0 or number == len(questions):
            print(
                f"stored {number}/{len(questions)} questions, {ingest.stored} turns, "
                f"{time.perf_counter() - started:.0f}s",
                file=sys.stderr,
                flush=True,
            )


def evaluate_all(
    args: argparse.Namespace,
    questions: list[dict[str, Any]],
    users: list[str],
    ingest: Ingest,
    path: Path,
    stored_after: float,
    summary: RunSummary,
) -> int:
    """Search, print the tables; the number of searches throttled (429) and sent again."""
    hosts = [args.host, *args.also_host]
    turns = sum(len(s) for q in questions for s in q["haystack_sessions"])
    evidence = sum(t.get("has_answer") is True for q in questions for s in q["haystack_sessions"] for t in s)  # fmt: skip
    print(f"command: {' '.join(sys.argv)}")
    sessions = sum(len(q["haystack_sessions"]) for q in questions)
    print(
        f"data: {path} ({path.stat().st_size / 1e6:.1f} MB) — {len(questions)} questions, "
        f"{sessions} sessions, {turns} user turns ({evidence} evidence turns); "
        + (
            f"stored by run {args.reuse}"
            if args.reuse
            else f"{ingest.stored} memories stored in {stored_after:.0f}s"
        )
    )
    if not args.reuse:
        print(
            f"ingest: {ingest.adds} add requests (infer=false); {ingest.blank} blank turns "
            f"skipped, {ingest.truncated} turns truncated to {args.max_text_chars} characters, "
            f"{ingest.duplicates} turns already stored in their scope (same text), "
            f"{ingest.split} sessions split over several adds (embedding budget "
            f"{args.embed_budget} tokens, {args.max_messages} messages), "
            f"{len(ingest.refused)} adds refused as over the budget and halved, "
            f"{ingest.undated} sessions without a readable date, "
            f"{ingest.unstored_evidence} evidence turns not stored"
        )
    for refusal in ingest.refused[:3]:
        print(f"  refused: {refusal}")
    calibrate = args.calibration and len(users) > 1  # another question's scope to ask in
    runs = [
        Run(host, Api(host, args.api_key), Calibration() if calibrate else None) for host in hosts
    ]
    for server in runs:
        for _ in range(20):  # each web worker loads the embedding model on its first search
            body = {"query": "warm up", "filters": {"user_id": users[0]}}
            server.api.call("POST", "/v3/memories/search/", json=body)
    undated: list[str] = []
    before = sum(server.api.calls for server in runs)
    with summary.phase(f"search (HTTP, {len(runs)} server(s) in turn)", "searches") as searched:
        for index, (question, user_id) in enumerate(zip(questions, users, strict=True)):
            other = users[(index + 1) % len(users)]
            rotation = index % len(runs)
            for server in runs[rotation:] + runs[:rotation]:
                ask(server, question, user_id, other, undated)
        searched.count = sum(server.api.calls for server in runs) - before
    if undated:
        print(f"{len(undated)} questions without a readable date: no reference_date")
    for server in runs:
        report(server)
        if server.calibration is not None:
            server.calibration.report(server.host)
    for server in runs[1:]:
        same = sum(a == b for a, b in zip(runs[0].rankings, server.rankings, strict=True))
        print(
            f"rankings of {server.host} identical to {runs[0].host}'s: "
            f"{same} of {len(server.rankings)} questions"
        )
    if args.reuse:
        return sum(server.api.throttled for server in runs)
    mean_turns = (ingest.stored + ingest.duplicates) / max(1, ingest.adds)
    print(
        f"add latency per request (infer=false, {mean_turns:.1f} turns on average): "
        f"{fmt_ms(percentiles(ingest.add_times))} over {len(ingest.add_times)}"
    )
    return sum(server.api.throttled for server in runs)


if __name__ == "__main__":
    main()
