"""The cost of a connection pooler on the hot path: the same requests to several servers, paired.

Each `--target label=url` is a running web server (gunicorn with config/gunicorn_conf.py,
ENGRAM_API_RATE=off) on the same database and key: e.g. the code before the change, the code
after it on a direct connection, and the code after it through PgBouncer in transaction mode
(ENGRAM_DB_POOL_MODE=transaction). Every round sends each request to every target in a shuffled
order, one at a time over a warm keep-alive connection (bench/http_floor.py's client), so drift
of the machine is shared by all targets. Per target and request: p50/p95/p99, and the p50 of
the per-round differences from the first target.

    scripts/pgbouncer.sh start
    ENGRAM_API_RATE=off .venv/bin/gunicorn -c config/gunicorn_conf.py --bind 127.0.0.1:8201 &
    DATABASE_URL="$(scripts/pgbouncer.sh url)" ENGRAM_DB_POOL_MODE=transaction \
        ENGRAM_API_RATE=off .venv/bin/gunicorn -c config/gunicorn_conf.py --bind 127.0.0.1:8202 &
    .venv/bin/python bench/pooler.py --target direct=http://127.0.0.1:8201 \
        --target pgbouncer=http://127.0.0.1:8202 [--rounds 500]

The requests: `GET /v1/ping/` (authentication and the access log: autocommit statements),
`POST /v2/memories/search/` and `GET /v1/memories/<id>/` (one tenant transaction each) over 50
memories the run adds (infer=false) under user "pooler-<run>" and deletes at the end.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import default_key, percentiles
from http_floor import Client

Request = Callable[[Client], float]


def requests(user: str, memory_id: str) -> dict[str, Request]:
    search = {"query": "green tea in the morning", "filters": {"user_id": user}, "top_k": 5}
    return {
        "ping": lambda c: c.call("GET", "/v1/ping/")[1],
        "search": lambda c: c.call("POST", "/v2/memories/search/", search)[1],
        "get": lambda c: c.call("GET", f"/v1/memories/{memory_id}/")[1],
    }


def seed(client: Client, user: str) -> str:
    messages = [
        {"role": "user", "content": f"I drink green tea, cup number {i}."} for i in range(50)
    ]
    body = {"messages": messages, "user_id": user, "infer": False}
    added, _ = client.call("POST", "/v1/memories/", body)
    return str(added["results"][0]["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", action="append", required=True, help="label=url")
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--key", default=default_key())
    parser.add_argument("--seed", type=int, default=51)
    args = parser.parse_args()
    if not args.key:
        parser.error("no API key: pass --key or set ENGRAM_API_KEY")
    targets = dict(t.split("=", 1) for t in args.target)
    clients = {label: Client(url, args.key, keep_alive=True) for label, url in targets.items()}
    first = next(iter(clients))
    user = f"pooler-{uuid.uuid4().hex[:8]}"
    memory_id = seed(clients[first], user)
    rng = random.Random(args.seed)
    calls = requests(user, memory_id)
    timings: dict[str, dict[str, list[float]]] = {n: {t: [] for t in clients} for n in calls}
    try:
        for round_ in range(args.warmup + args.rounds):
            for name, call in calls.items():
                order = list(clients)
                rng.shuffle(order)
                for label in order:
                    took = call(clients[label])
                    if round_ >= args.warmup:
                        timings[name][label].append(took)
    finally:
        clients[first].call("DELETE", f"/v1/memories/?user_id={user}")
    print(f"{args.rounds} rounds, each request to each target in a shuffled order (keep-alive)")
    for name, by_target in timings.items():
        for label, samples in by_target.items():
            stats = percentiles(samples)
            line = f"{name:7s} {label:12s} p50={stats['p50']:.2f}ms p95={stats['p95']:.2f}ms p99={stats['p99']:.2f}ms"
            if label != first:
                paired = [b - a for a, b in zip(by_target[first], samples, strict=True)]
                line += f"  paired p50 vs {first}: {statistics.median(paired):+.3f}ms"
            print(line)


if __name__ == "__main__":
    main()
