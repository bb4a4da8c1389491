"""One project's backlog against another project's add: how long the second waits.

Against a running server and worker (`make run`): project A queues --backlog adds (infer=true)
at once, then project B queues one; prints how long B's add took to be SUCCEEDED, and how
many of A's were still unfinished then. Without fairness B's add waits for the whole backlog.
Keys for two projects of their own are minted in the local database (bench-fair-a/-b).
Also A's add request latency (p50/p95/p99), and the run summary (common.RunSummary): adds
queued and events finished per second, and the peak RSS of the client, web server, worker and
postgres.

    .venv/bin/python bench/fair_queue.py [--backlog 500]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

import httpx
from common import RunSummary, default_host, fmt_ms, load_local_env, percentiles


def mint_keys() -> tuple[str, str]:
    load_local_env()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    import logging

    from tenants.actions import do_create_api_key

    logging.getLogger("httpx").setLevel(logging.WARNING)
    a = do_create_api_key(org_name="bench-fair", project_name="bench-fair-a", name="fair a")
    b = do_create_api_key(org_name="bench-fair", project_name="bench-fair-b", name="fair b")
    return a.raw, b.raw


def add(http: httpx.Client, key: str, user: str, text: str, timings: list[float]) -> str:
    body = {"messages": [{"role": "user", "content": text}], "user_id": user}
    started = time.perf_counter()
    response = http.post("/v1/memories/", json=body, headers={"Authorization": f"Token {key}"})
    timings.append((time.perf_counter() - started) * 1000)
    response.raise_for_status()
    return str(response.json()[0]["event_id"])


def status(http: httpx.Client, key: str, event_id: str) -> Any:
    answer = http.get(f"/v1/event/{event_id}/", headers={"Authorization": f"Token {key}"})
    return answer.json()["status"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=default_host())
    parser.add_argument("--backlog", type=int, default=500)
    args = parser.parse_args()
    key_a, key_b = mint_keys()
    summary = RunSummary.start(args.host)
    http = httpx.Client(base_url=args.host, timeout=60)
    user = f"fair-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    timings: list[float] = []
    with summary.phase("project A's adds queued (infer=true)", "adds") as rate:
        backlog = [
            add(http, key_a, user, f"I visited town number {n} with cousin {n * 7 % 100}.", timings)
            for n in range(args.backlog)
        ]
        rate.count = len(backlog)
    queued = rate.seconds
    b_sent = time.perf_counter()
    b_event = add(http, key_b, user, "I play the cello every Sunday.", [])
    while status(http, key_b, b_event) in ("PENDING", "RUNNING"):
        time.sleep(0.05)
    b_done = time.perf_counter() - b_sent
    waiting = sum(status(http, key_a, e) in ("PENDING", "RUNNING") for e in backlog)
    print(f"project A queued {args.backlog} adds in {queued:.1f} s; then project B one add")
    print(f"A's add request latency: {fmt_ms(percentiles(timings))}")
    print(
        f"B's add SUCCEEDED {b_done:.2f} s after it was sent; "
        f"{waiting} of A's {args.backlog} were still unfinished then"
    )
    while any(status(http, key_a, e) in ("PENDING", "RUNNING") for e in backlog[-5:]):
        time.sleep(1)
    finished = time.perf_counter() - started
    print(f"A's backlog finished {finished:.0f} s after the first add")
    summary.add("events finished (A's backlog and B's add)", args.backlog + 1, finished, "events")
    for key in (key_a, key_b):
        http.delete(f"/v1/memories/?user_id={user}", headers={"Authorization": f"Token {key}"})
    summary.report()


if __name__ == "__main__":
    main()
