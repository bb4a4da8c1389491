"""What `rerank: true` adds to a search over HTTP, with a reranker whose own time is known.

Starts the fake reranker service of the tests (tests/fake_rerank.py: Cohere's POST /rerank,
the candidates ranked in reverse) in this process, and gunicorn (config/gunicorn_conf.py, one
web process, on a free loopback port and the database of .local/engram.env) with
ENGRAM_RERANK=endpoint pointed at it. Seeds one scope with --memories memories (infer=false),
then sends --requests searches of each kind, interleaved one by one on one keep-alive client:

- **off:** `rerank: false` (the fused order, as without a reranker);
- **on, 0 ms:** `rerank: true`, the fake answering at once;
- **on, 20 ms:** `rerank: true`, the fake sleeping 20 ms before it answers.

Every search asks top_k 10 with threshold 0, so the reranker is sent ENGRAM_RERANK_TOP_N (20)
candidates each time. Prints p50 / p95 / p99 / mean of each and the added cost over "off" less
the fake's own sleep: what engram itself spends on a rerank (the request body, one connection
per call through config.outbound.deadline_client, reading the reply, reordering). A key for a
project of its own is minted in the local database (bench-rerank); its memories are deleted at
the end.

    .venv/bin/python bench/rerank.py [--requests 300] [--memories 200]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")

from common import ROOT, fmt_ms, load_local_env, percentiles, sentence
from load import auth, free_port

from tests.fake_rerank import FakeReranker, running

load_local_env()
BIN = Path(sys.executable).parent
PHASES = {"off": (False, 0.0), "on, 0 ms": (True, 0.0), "on, 20 ms": (True, 0.020)}


def mint_key() -> str:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from tenants.actions import do_create_api_key

    key = do_create_api_key(org_name="bench-rerank", project_name="bench-rerank", name="bench")
    return str(key.raw)


class Server:
    """gunicorn with the reranker configured, in a process group of its own."""

    def __init__(self, reranker: str, log: Path) -> None:
        self.host = f"http://127.0.0.1:{free_port()}"
        environ = {**os.environ, "ENGRAM_API_RATE": "off", "ENGRAM_LOG_LEVEL": "WARNING",
                   "ENGRAM_WEB_WORKERS": "1", "ENGRAM_RERANK": "endpoint",
                   "ENGRAM_RERANK_URL": reranker}  # fmt: skip
        self.log = log.open("w")
        self.process = subprocess.Popen(  # noqa: S603 - our own command
            [str(BIN / "gunicorn"), "-c", "config/gunicorn_conf.py",
             "--bind", self.host.removeprefix("http://")],
            cwd=ROOT, env=environ, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def wait_ready(self, key: str) -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with suppress(httpx.HTTPError):
                if httpx.get(f"{self.host}/v1/ping/", headers=auth(key), timeout=5).is_success:
                    return
            time.sleep(0.5)
        raise SystemExit(f"the server did not answer within 90 s; see {self.log.name}")

    def stop(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=30)


def seed(http: httpx.Client, user: str, count: int, rng: random.Random) -> None:
    for start in range(0, count, 100):
        messages = [
            {"role": "user", "content": sentence(rng)}
            for _ in range(start, min(count, start + 100))
        ]
        http.post(
            "/v1/memories/", json={"messages": messages, "user_id": user, "infer": False}
        ).raise_for_status()


def measure(
    http: httpx.Client, fake: FakeReranker, user: str, requests: int, rng: random.Random
) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {name: [] for name in PHASES}
    for _ in range(requests):
        query = sentence(rng)
        for name, (rerank, delay) in PHASES.items():
            fake.delay = delay
            body: dict[str, Any] = {"query": query, "filters": {"user_id": user}, "top_k": 10,
                                    "threshold": 0, "rerank": rerank}  # fmt: skip
            started = time.perf_counter()
            response = http.post("/v3/memories/search/", json=body)
            timings[name].append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
            expected = "true" if rerank else "false"
            if response.headers.get("Engram-Reranked") != expected:
                raise SystemExit(
                    f"{name}: Engram-Reranked {response.headers.get('Engram-Reranked')}"
                )
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--memories", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(48)
    key, user = mint_key(), f"rerank-{uuid.uuid4().hex[:8]}"
    log = Path(tempfile.mkdtemp(prefix="bench-rerank-")) / "gunicorn.log"
    with running(FakeReranker()) as fake:
        server = Server(fake.url, log)
        try:
            server.wait_ready(key)
            with httpx.Client(base_url=server.host, headers=auth(key), timeout=60) as http:
                seed(http, user, args.memories, rng)
                measure(http, fake, user, 20, rng)  # warm-up: the model, the plans, the pool
                fake.requests.clear()
                timings = measure(http, fake, user, args.requests, rng)
                sent = [len(r["body"]["documents"]) for r in fake.requests]
                http.delete("/v1/memories/", params={"user_id": user})
        finally:
            server.stop()
    print(f"search over HTTP, {args.requests} of each, {args.memories} memories in the scope, "
          f"top_k 10, {min(sent)}-{max(sent)} candidates sent to the reranker")  # fmt: skip
    off = percentiles(timings["off"])
    for name, (_, delay) in PHASES.items():
        stats = percentiles(timings[name])
        print(f"  {name:<10} {fmt_ms(stats)}")
        if name != "off":
            added = {k: stats[k] - off[k] - delay * 1000 for k in ("p50", "p95", "p99")}
            print(
                f"  {'':<10} added beyond the reranker's own {delay * 1000:g} ms: {fmt_ms(added)}"
            )


if __name__ == "__main__":
    main()
