"""The HTTP floor: what a request costs between the socket and the view, and where it goes.

Against a running server (gunicorn with config/gunicorn_conf.py) started with
ENGRAM_API_RATE=off (the default 1200/minute per key would answer 429 part-way), with the
stdlib's http.client so the client adds as little as possible of its own:

- `GET /v1/ping/` (authentication, throttling, the access-log row; no tenant transaction);
- add ack: `POST /v1/memories/` with infer=true (validated, the event written, queued; no
  worker needed for the answer), also with a new Idempotency-Key each time (keep-alive);
- raw ingest: `POST /v1/memories/` with infer=false, batches of 100 messages (embedded and
  stored in the request) from two clients at once, one per web worker ("on two cores"):
  memories/s.

Each latency is measured twice: a warm keep-alive client (one connection, reused; reopened
only if the server closes it) and a new connection per request. Then, with --profile, the
same ping and add in-process (Django's test client, no socket): the time per middleware,
authentication, the access-log write and rendering, from cProfile. Each line has p50/p95/p99;
at the end the run summary (common.RunSummary): requests (or memories) per second of each kind,
and the peak RSS of the client, web server, worker and postgres.

    ENGRAM_API_RATE=off .venv/bin/gunicorn -c config/gunicorn_conf.py --bind 127.0.0.1:8200 &
    .venv/bin/python bench/http_floor.py --host http://127.0.0.1:8200 [--requests 500]
        [--adds 200] [--batches 10] [--ingest-clients 2] [--profile | --no-http]

The adds go to the key's project under user ids "floor-<run>-…", deleted at the end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")

from common import RunSummary, default_host, default_key, fmt_ms, load_local_env, percentiles

load_local_env()


class Client:
    """One HTTP/1.1 client: `keep_alive` reuses its connection, else opens one per request."""

    def __init__(self, host: str, key: str, *, keep_alive: bool) -> None:
        parts = urlsplit(host)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.headers = {"Authorization": f"Token {key}", "Content-Type": "application/json"}
        self.keep_alive = keep_alive
        self.connection: http.client.HTTPConnection | None = None
        self.reconnects = 0

    def _connection(self) -> http.client.HTTPConnection:
        if self.connection is None:
            self.connection = http.client.HTTPConnection(*self.address, timeout=60)
            self.reconnects += 1
        return self.connection

    def call(self, method: str, path: str, body: Any = None) -> tuple[Any, float]:
        payload = None if body is None else json.dumps(body).encode()
        started = time.perf_counter()
        connection = self._connection()
        connection.request(method, path, body=payload, headers=self.headers)
        response = connection.getresponse()
        data = response.read()
        elapsed = (time.perf_counter() - started) * 1000
        if not self.keep_alive or response.will_close:
            connection.close()
            self.connection = None
        if response.status >= 400:
            raise RuntimeError(f"{method} {path} -> {response.status}: {data[:300]!r}")
        return (json.loads(data) if data else None), elapsed


def timed(
    call: Callable[[int], float], count: int, summary: RunSummary, label: str, warmup: int = 20
) -> list[float]:
    """`count` calls after `warmup` untimed ones; their wall time is the phase `label`."""
    for i in range(warmup):
        call(i)
    with summary.phase(label, "requests") as rate:
        timings = [call(i) for i in range(count)]
        rate.count = len(timings)
    return timings


def measure(host: str, key: str, args: argparse.Namespace, run: str, summary: RunSummary) -> None:
    for keep_alive in (True, False):
        client = Client(host, key, keep_alive=keep_alive)
        label = "keep-alive" if keep_alive else "new connection per request"

        def ping_once(i: int, client: Client = client) -> float:
            return client.call("GET", "/v1/ping/")[1]

        ping = timed(ping_once, args.requests, summary, f"ping [{label}]")
        print(f"ping      [{label}] {fmt_ms(percentiles(ping))}")

        def ack(i: int, client: Client = client) -> float:
            body = {
                "messages": [{"role": "user", "content": f"I like green tea, cup {i}."}],
                "user_id": f"floor-{run}-ack",
                "infer": True,
            }
            return client.call("POST", "/v1/memories/", body)[1]

        acks = timed(ack, args.adds, summary, f"add ack [{label}]", warmup=5)
        print(f"add ack   [{label}] {fmt_ms(percentiles(acks))}")
        if keep_alive:

            def keyed_ack(i: int, client: Client = client) -> float:
                client.headers["Idempotency-Key"] = f"floor-{run}-{i}-{uuid.uuid4().hex}"
                try:
                    return ack(i, client)
                finally:
                    del client.headers["Idempotency-Key"]

            keyed = timed(keyed_ack, args.adds, summary, f"add ack [{label}, key]", warmup=5)
            print(f"add ack   [{label}, Idempotency-Key] {fmt_ms(percentiles(keyed))}")
        if keep_alive:
            opened = client.reconnects - 1
            print(
                f"          connections reopened by the server: {opened} of "
                f"{args.requests + 2 * args.adds + 30} requests"
            )

    stored, elapsed, per_batch = ingest(host, key, args, run)
    rate = summary.add(f"ingest [{args.ingest_clients} clients]", stored, elapsed, "memories")
    print(
        f"ingest    [keep-alive, {args.ingest_clients} clients] {rate.per_second:.0f} memories/s "
        f"(infer=false, {args.batches} batches of 100 each; per batch {fmt_ms(per_batch)})"
    )
    client = Client(host, key, keep_alive=True)
    for suffix in ("ack", "ingest"):
        client.call("DELETE", f"/v1/memories/?user_id=floor-{run}-{suffix}")


def ingest(
    host: str, key: str, args: argparse.Namespace, run: str
) -> tuple[int, float, dict[str, float]]:
    """`ingest_clients` clients at once (one per web worker: "on two cores"), each sending
    `batches` batches of 100 messages with infer=false after one warm-up batch: (memories
    sent, wall seconds, per-batch percentiles)."""
    barrier = threading.Barrier(args.ingest_clients + 1)
    timings: list[float] = []

    def one_client(number: int) -> None:
        client = Client(host, key, keep_alive=True)

        def body(batch: int) -> dict[str, Any]:
            messages = [
                {"role": "user", "content": f"Fact {number}-{batch}-{i}: reading {i * 7} units."}
                for i in range(100)
            ]
            return {"messages": messages, "user_id": f"floor-{run}-ingest", "infer": False}

        client.call("POST", "/v1/memories/", body(-1))
        barrier.wait()
        timings.extend(
            client.call("POST", "/v1/memories/", body(batch))[1] for batch in range(args.batches)
        )

    threads = [
        threading.Thread(target=one_client, args=(n,), daemon=True)
        for n in range(args.ingest_clients)
    ]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if len(timings) != args.batches * args.ingest_clients:
        raise SystemExit("an ingest client failed (see above)")
    return 100 * len(timings), elapsed, percentiles(timings)


def profile(key: str, count: int, run: str, summary: RunSummary) -> None:
    """In-process: the same requests through Django's test client, under cProfile."""
    import cProfile
    import pstats

    import django

    django.setup()
    from django.test import Client as TestClient

    client = TestClient(HTTP_AUTHORIZATION=f"Token {key}", HTTP_HOST="127.0.0.1")
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": "I like green tea."}],
            "user_id": f"floor-{run}-profile",
            "infer": True,
        }
    )
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("ping", lambda: client.get("/v1/ping/")),
        ("add ack", lambda: client.post("/v1/memories/", body, content_type="application/json")),
    ]
    # The functions whose cumulative time is shown: each middleware, authentication (key
    # lookup + hash), the access-log row (insert + last_used), the tenant transaction (with
    # its commit), throttling, content negotiation, rendering, and the SQL calls.
    watched = ("middleware.py:", "authenticate_key", "write_row", "project_context", "render",
               "finalize_response", "check_throttles", "perform_content_negotiation", "_commit",
               "execute")  # fmt: skip
    for name, call in cases:
        for _ in range(20):
            call()
        wall = []
        profiler = cProfile.Profile()
        with summary.phase(f"in-process {name} (under cProfile)", "requests") as rate:
            for _ in range(count):
                started = time.perf_counter()
                profiler.enable()
                response = call()
                profiler.disable()
                wall.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, response.content
            rate.count = count
        print(f"\nin-process {name}: {fmt_ms(percentiles(wall))} (under cProfile)")
        stats = pstats.Stats(profiler)
        rows = []
        for (filename, _line, function), entry in stats.stats.items():  # type: ignore[attr-defined]
            cumulative = entry[3]
            label = f"{Path(filename).parent.name}/{Path(filename).name}:{function}"
            for needle in watched:
                if needle in f"{Path(filename).name}:{function}" or needle == function:
                    rows.append((cumulative / count * 1000, entry[1], label))
                    break
        waits = sum(
            entry[1]
            for (filename, _line, function), entry in stats.stats.items()  # type: ignore[attr-defined]
            if function == "wait" and filename.endswith("psycopg/connection.py")
        )
        print(f"  database round trips per request (both connections): {waits / count:.1f}")
        for per_request, calls, label in sorted(rows, reverse=True)[:25]:
            print(f"  {per_request:7.3f} ms  {calls / count:5.1f}x  {label}")
    client.delete(f"/v1/memories/?user_id=floor-{run}-profile")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=default_host())
    parser.add_argument("--key", default=default_key())
    parser.add_argument("--requests", type=int, default=500, help="pings per client kind")
    parser.add_argument("--adds", type=int, default=200, help="add acks per client kind")
    parser.add_argument("--batches", type=int, default=10, help="ingest batches of 100, per client")
    parser.add_argument("--ingest-clients", type=int, default=2, help="concurrent ingest clients")
    parser.add_argument("--profile", action="store_true", help="also profile in-process")
    parser.add_argument("--no-http", action="store_true", help="only the in-process profile")
    args = parser.parse_args()
    if not args.key:
        parser.error("no API key: pass --key or set ENGRAM_API_KEY")
    run = uuid.uuid4().hex[:8]
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; cpus {os.cpu_count()}")
    summary = RunSummary.start(None if args.no_http else args.host)
    if not args.no_http:
        measure(args.host, args.key, args, run, summary)
    if args.profile or args.no_http:
        profile(args.key, min(args.requests, 300), run, summary)
    summary.report()


if __name__ == "__main__":
    main()
