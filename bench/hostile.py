"""What a hostile request costs: the requests that once took seconds, and the worst accepted ones.

Against a running server (`make run`): each request is sent --repeat times; prints the status it
got, its latency percentiles (p50/p95/p99) and requests per second (one at a time). The refused
ones should answer 400 in milliseconds; the largest filter the API accepts (100 conditions, 1000
values) shows what a legitimate worst case costs. At the end the run summary (common.RunSummary):
each case's requests per second and the peak RSS of the client, web server, worker and postgres.

    .venv/bin/python bench/hostile.py [--repeat 20] [--warmup 4]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable

import httpx
from common import RunSummary, default_host, default_key, fmt_ms, percentiles


def search(filters: object) -> bytes:
    return json.dumps({"query": "what does the user drink?", "filters": filters}).encode()


CASES: dict[str, Callable[[], bytes]] = {
    # Refused (each took 2-9 s before the limits).
    "10k metadata keys": lambda: search({"metadata": {f"k{i}": "v" for i in range(10_000)}}),
    "OR of 20k terms": lambda: search({"OR": [{"user_id": f"u{i}"} for i in range(20_000)]}),
    "40k memory_ids": lambda: search({"memory_ids": [str(uuid.uuid4()) for _ in range(40_000)]}),
    "JSON nested 100k deep": lambda: b'{"query": "x", "filters": ' + b"[" * 100_000 + b"]" * 100_000
    + b"}",
    # Accepted: the largest filters the API takes.
    "OR of 100 conditions": lambda: search({"OR": [{"user_id": f"u{i}"} for i in range(99)]}),
    "in-list of 1000 ids": lambda: search({"user_id": {"in": [f"u{i}" for i in range(999)]}}),
    "100 metadata keys": lambda: search({"user_id": "*", "metadata": {f"k{i}": i for i in range(98)}}),
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=default_host())
    parser.add_argument("--key", default=default_key())
    parser.add_argument("--repeat", type=int, default=20)
    # Untimed requests per case first: each web worker's first request on a code path is slow
    # (imports, the embedding model's first load), which is not what a request costs.
    parser.add_argument("--warmup", type=int, default=4)
    args = parser.parse_args()
    headers = {"Authorization": f"Token {args.key}", "Content-Type": "application/json"}
    print(
        f"{args.host}, {args.repeat} requests per case after {args.warmup} untimed, "
        "POST /v3/memories/search/"
    )
    summary = RunSummary.start(args.host)
    with httpx.Client(base_url=args.host, headers=headers, timeout=120) as http:
        for name, build in CASES.items():
            body = build()
            for _ in range(args.warmup):
                http.post("/v3/memories/search/", content=body)
            with summary.phase(name, "requests") as rate:
                timings, statuses = send(http, body, args.repeat)
                rate.count = len(timings)
            size = f"{len(body) / 1024:.0f} KiB"
            print(
                f"{name:24} {size:>9}  status {sorted(statuses)}  {fmt_ms(percentiles(timings))}"
                f"  {rate.per_second:.1f} requests/s"
            )
    summary.report()


def send(http: httpx.Client, body: bytes, repeat: int) -> tuple[list[float], set[int]]:
    """`body` sent `repeat` times, one at a time: each one's milliseconds, the statuses seen."""
    timings, statuses = [], set()
    for _ in range(repeat):
        started = time.perf_counter()
        response = http.post("/v3/memories/search/", content=body)
        timings.append((time.perf_counter() - started) * 1000)
        statuses.add(response.status_code)
    return timings, statuses


if __name__ == "__main__":
    main()
