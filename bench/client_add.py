"""The queued add as an application sees it: the official `mem0ai` client's `MemoryClient.add`
of three sentences, one after another, against a running server and its worker (`make run`).

Each add is answered once the request is validated, stored and queued; the worker extracts it
meanwhile, on the same machine. The rounds alternate between the client and the same request
body posted with a bare HTTP client (httpx, keep-alive: what the client library adds); each
round's extractions are waited for before the next round starts. Each round prints
p50/p95/p99; the run summary (common.RunSummary) has the adds per second and the peak RSS and
CPU of each process group. (Pausing the worker with SIGSTOP was tried to isolate it: its
process was restarted, so it is not offered.)

    make run    # in another terminal
    .venv/bin/python bench/client_add.py [--host URL --api-key KEY] [--adds 40] [--rounds 3]

The adds go to user ids "client-add-<run>-<round>-<client|httpx>", deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

# The client reports usage to its vendor unless told not to; a benchmark sends nothing out.
os.environ["MEM0_TELEMETRY"] = "False"

from common import Api, RunSummary, default_host, default_key, fmt_ms, percentiles

SENTENCES = (
    "I moved to Lisbon last spring for a job at a design studio. "
    "My sister Ana visits every other month and we go hiking in Sintra. "
    "I'm trying to learn Portuguese, two evenings a week. ({n})"
)
LABELS = {"client": "mem0ai client", "httpx": "httpx"}
# How long a round's extractions may take before the next round starts.
DRAIN_SECONDS = 300


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=default_host())
    parser.add_argument("--api-key", default=default_key())
    parser.add_argument("--adds", type=int, default=40, help="timed adds per round")
    parser.add_argument("--warmup", type=int, default=5, help="untimed adds before each round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    return parser.parse_args()


def drain(api: Api, events: list[str]) -> float:
    """Wait until every event of `events` has left the queue; the seconds waited."""
    started = time.perf_counter()
    pending = list(events)
    while pending and time.perf_counter() - started < DRAIN_SECONDS:
        body, _ = api.call("GET", f"/v1/event/{pending[-1]}/")
        if body.get("status") in ("PENDING", "RUNNING"):
            time.sleep(0.5)
            continue
        pending.pop()
    if pending:
        sys.exit(f"{len(pending)} adds still queued after {DRAIN_SECONDS} s: is the worker up?")
    return time.perf_counter() - started


def run_round(
    client: Any, api: Api | None, user_id: str, args: argparse.Namespace
) -> tuple[list[float], list[str]]:
    """`--warmup` untimed adds, then `--adds` timed ones: their latencies (ms) and event ids.
    Through the `mem0ai` client, or with `api` the body it sends, posted by httpx."""
    timings: list[float] = []
    events: list[str] = []
    for n in range(args.warmup + args.adds):
        text = SENTENCES.format(n=n)
        started = time.perf_counter()
        if api is None:
            answer = client.add(text, user_id=user_id)
        else:
            body = {"messages": [{"role": "user", "content": text}], "user_id": user_id}
            answer, _ = api.call("POST", "/v3/memories/add/", json=body)
        elapsed = (time.perf_counter() - started) * 1000
        if n >= args.warmup:
            timings.append(elapsed)
        # /v3/'s queued answer: {"message", "status": "PENDING", "event_id"}.
        events.append(str(answer["event_id"]))
    return timings, events


def main() -> None:
    args = parse_args()
    if not args.api_key:
        sys.exit("No API key: run `make run` first, or pass --api-key / set ENGRAM_API_KEY.")
    from mem0 import MemoryClient

    client = MemoryClient(host=args.host, api_key=args.api_key)
    api = Api(args.host, args.api_key)
    run = uuid.uuid4().hex[:8]
    kinds = list(LABELS)
    print(
        f"command: {' '.join(sys.argv)}\nhost: {args.host}; {args.adds} adds a round after "
        f"{args.warmup}, {args.rounds} round(s) of each of: {', '.join(LABELS.values())}"
    )
    summary = RunSummary.start(args.host)
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    users = []
    try:
        for round_number in range(args.rounds):
            for kind in kinds:
                user_id = f"client-add-{run}-{round_number}-{kind}"
                users.append(user_id)
                with summary.phase(f"add ({LABELS[kind]})", "adds") as rate:
                    bare = api if kind == "httpx" else None
                    timings, events = run_round(client, bare, user_id, args)
                    rate.count += args.warmup + args.adds
                waited = drain(api, events)
                results[kind].extend(timings)
                print(
                    f"round {round_number + 1}, {LABELS[kind]}: "
                    f"{fmt_ms(percentiles(timings))}; backlog drained in {waited:.1f} s"
                )
        for kind, timings in results.items():
            print(f"all rounds, {LABELS[kind]}: {fmt_ms(percentiles(timings))}")
    finally:
        for user_id in users:
            api.call("DELETE", f"/v1/memories/?user_id={user_id}")
        summary.report()


if __name__ == "__main__":
    main()
