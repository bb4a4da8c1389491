"""Retrieval quality on LoCoMo, through the public API.

Every dialog turn is stored raw (infer=false) as "[<session date>] <speaker>: <text>", one user id
per conversation, one add request per session (so a turn's neighbours are its context), with its
turn id (dia_id) written into the memory's metadata. Every question of categories 1-4 is then a
search in that user's scope; a hit is a returned memory whose turn id is in the question's evidence.
Prints recall@1/5/10/20 and MRR per category and overall, and search latency.

    make run   # in another terminal (or any engram URL + key)
    .venv/bin/python bench/locomo.py [--data ../shared/data/locomo-dev.json] [--host URL --api-key KEY]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import ROOT, Api, default_host, default_key, fmt_ms, percentiles

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


def ingest(api: Api, sample: dict[str, Any], user_id: str) -> tuple[int, list[float]]:
    conversation = sample["conversation"]
    stored, timings = 0, []
    sessions = sorted(
        (int(k.split("_")[1]) for k in conversation if re.fullmatch(r"session_\d+", k)),
    )
    for number in sessions:
        turns = conversation[f"session_{number}"]
        date = conversation.get(f"session_{number}_date_time", "")
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


def evaluate(api: Api, sample: dict[str, Any], user_id: str, scores: dict, latencies: list) -> None:
    for qa in sample["qa"]:
        category = qa.get("category")
        evidence = evidence_ids(qa.get("evidence", []))
        if category not in CATEGORIES or not evidence:
            continue
        body = {
            "query": qa["question"],
            "filters": {"user_id": user_id},
            "top_k": max(KS),
            "threshold": 0,
        }
        result, elapsed = api.call("POST", "/v3/memories/search/", json=body)
        latencies.append(elapsed)
        ranked = [(r.get("metadata") or {}).get("dia_id") for r in result["results"]]
        row = {f"r@{k}": len(evidence & set(ranked[:k])) / len(evidence) for k in KS}
        first = next((i for i, d in enumerate(ranked, 1) if d in evidence), None)
        row["mrr"] = 1 / first if first else 0.0
        for key in (category, "all"):
            for metric, value in row.items():
                scores[key][metric].append(value)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo-dev.json"))
    parser.add_argument("--host", default=default_host())
    parser.add_argument("--api-key", default=default_key())
    parser.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    args = parser.parse_args()
    if not args.api_key:
        sys.exit("No API key: run `make run` first, or pass --api-key / set ENGRAM_API_KEY.")
    data = json.loads(Path(args.data).read_text())
    if args.limit:
        data = data[: args.limit]
    api = Api(args.host, args.api_key)
    run = uuid.uuid4().hex[:8]
    scores: dict[Any, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    latencies: list[float] = []
    add_times: list[float] = []
    started = time.perf_counter()
    turns = 0
    for sample in data:
        user_id = f"locomo-{sample['sample_id']}-{run}"
        stored, timings = ingest(api, sample, user_id)
        turns += stored
        add_times += timings
        evaluate(api, sample, user_id, scores, latencies)
        api.call("DELETE", "/v1/memories/", params={"user_id": user_id})
    print(f"command: {' '.join(sys.argv)}")
    print(
        f"data: {args.data} — {len(data)} conversations, {turns} turns stored, "
        f"{len(scores['all']['mrr'])} questions (categories 1-4), {time.perf_counter() - started:.0f}s"
    )
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
    print(
        f"add latency per session (infer=false): {fmt_ms(percentiles(add_times))} over {len(add_times)}"
    )


if __name__ == "__main__":
    main()
