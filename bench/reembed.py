"""Switching the embedding model of a serving deployment (`manage.py reembed`): how fast the new
vectors are built, how long the switch holds the tables, and what search over HTTP sees before,
during and after, on a scratch database of its own.

It creates a database (the owner role needs CREATEDB), migrates it, imports N memories (default
5,000) of U users (import_mem0, the local model), starts a web server on it, and keeps one client
searching (the users' scopes, in turn) while `reembed` runs, as its own process, to a hosted
768-dimension model: the local fake embeddings API of the tests (feature hashing: it costs
nearly nothing, so the figures are engram's own, not a model's). Then `reembed` back to the local
model. Prints each phase's search latency (p50 / p95 / p99), searches per second and errors
(503s while processes catch up are expected: the check interval), reembed's own figures, and its
peak memory; then the run summary (common.RunSummary): memories imported and re-embedded and
searches per second, and the peak RSS of this process, its children, the server and postgres.

    make migrate
    .venv/bin/python bench/reembed.py [--memories 5000 --users 50]
    (the environment of .local/engram.env is read; the database engram_bench_reembed is made
    and dropped)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import psycopg
from common import RunSummary, fmt_ms, load_local_env, percentiles, sentence

from tests.fake_embeddings import FakeEmbeddings, _handler  # the tests' fake
from tests.local_server import serving

load_local_env()
ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
NAME = "engram_bench_reembed"
PORT = 8101


def url_for(url: str, name: str) -> str:
    """`url` with its database name replaced by `name`."""
    return urlsplit(url)._replace(path=f"/{name}").geturl()


def run(env: dict[str, str], *args: str) -> tuple[float, int, str]:
    """A manage.py command on the scratch database: (seconds, peak RSS in MB, its output)."""
    started = time.perf_counter()
    done = subprocess.run(  # noqa: S603 - our own command
        ["/usr/bin/time", "-f", "peak-rss-kb %M", str(PYTHON), "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        sys.exit(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    match = re.search(r"peak-rss-kb (\d+)", done.stderr)
    seconds = time.perf_counter() - started
    return seconds, int(match.group(1)) // 1024 if match else 0, done.stdout.strip()


class Searches(threading.Thread):
    """One client searching in turn until stopped; each sample tagged with the phase."""

    def __init__(self, key: str, users: int) -> None:
        super().__init__(daemon=True)
        self.key, self.users = key, users
        self.phase = "before"
        self.samples: dict[str, list[float]] = {}
        self.errors: dict[str, dict[int, int]] = {}
        self.seconds: dict[str, float] = {}  # each phase's wall time
        self.switched = time.perf_counter()
        self.stop = threading.Event()

    def switch(self, phase: str) -> None:
        """End the current phase (its wall time noted) and start `phase`."""
        now = time.perf_counter()
        self.seconds[self.phase] = self.seconds.get(self.phase, 0.0) + now - self.switched
        self.phase, self.switched = phase, now

    def run(self) -> None:
        rng = random.Random(3)
        with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=30) as client:
            while not self.stop.is_set():
                user = f"user-{rng.randrange(self.users)}"
                body = {"query": sentence(rng), "filters": {"user_id": user}}
                started = time.perf_counter()
                answer = client.post(
                    "/v2/memories/search/", json=body,
                    headers={"Authorization": f"Token {self.key}"},
                )  # fmt: skip
                took = (time.perf_counter() - started) * 1000
                phase = self.phase
                if answer.status_code == 200:
                    self.samples.setdefault(phase, []).append(took)
                else:
                    counts = self.errors.setdefault(phase, {})
                    counts[answer.status_code] = counts.get(answer.status_code, 0) + 1


def mem0_file(path: Path, memories: int, users: int, rng: random.Random) -> None:
    rows = [
        {"id": str(uuid.UUID(int=rng.getrandbits(128), version=4)), "memory": sentence(rng),
         "user_id": f"user-{i % users}", "created_at": "2025-01-01T00:00:00Z"}
        for i in range(memories)
    ]  # fmt: skip
    path.write_text(json.dumps({"results": rows}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=5_000)
    parser.add_argument("--users", type=int, default=50)
    args = parser.parse_args()
    summary = RunSummary.start(f"http://127.0.0.1:{PORT}")
    owner_url = os.environ["DATABASE_OWNER_URL"]
    with psycopg.connect(owner_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {NAME}")
        admin.execute(f"CREATE DATABASE {NAME}")
    env = {
        **os.environ,
        "DATABASE_URL": url_for(os.environ["DATABASE_URL"], NAME),
        "DATABASE_OWNER_URL": url_for(owner_url, NAME),
        "ENGRAM_LOG_LEVEL": "WARNING",
        "ENGRAM_API_RATE": "off",  # one client searching flat out, not throttled
    }
    try:
        with contextlib.ExitStack() as stack:
            scenario(env, args.memories, args.users, stack, summary)
        summary.report()
    finally:
        with psycopg.connect(owner_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")


def scenario(
    env: dict[str, str],
    memories: int,
    users: int,
    stack: contextlib.ExitStack,
    summary: RunSummary,
) -> None:
    run({**env, "DATABASE_URL": env["DATABASE_OWNER_URL"]}, "migrate", "--no-input", "-v", "0")
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "mem0.json"
        mem0_file(source, memories, users, random.Random(7))
        took, _, _ = run(env, "import_mem0", "--file", str(source), "--org", "b", "--project", "r")
    summary.add("import_mem0 (its own process)", memories, took, "memories")
    print(f"command: .venv/bin/python bench/reembed.py --memories {memories} --users {users}")
    print(f"{memories} memories of {users} users imported in {took:.0f} s")
    _, _, out = run(env, "create_api_key", "--org", "b", "--project", "r", "--name", "bench")
    key = out.splitlines()[-1].strip()
    server = subprocess.Popen(  # noqa: S603 - our own server
        [str(ROOT / ".venv" / "bin" / "gunicorn"), "-c", "config/gunicorn_conf.py",
         "--bind", f"127.0.0.1:{PORT}"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip

    def stop_server() -> None:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()

    stack.callback(stop_server)
    for _ in range(100):
        try:
            httpx.get(f"http://127.0.0.1:{PORT}/api/schema/", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.2)
    fake = FakeEmbeddings()
    fake.url = f"http://127.0.0.1:{stack.enter_context(serving(_handler(fake)))}/v1"
    hosted = {
        **env, "ENGRAM_EMBEDDER": "openai-compatible", "ENGRAM_EMBEDDING_URL": fake.url,
        "ENGRAM_EMBEDDING_MODEL": "fake-768", "ENGRAM_EMBEDDING_DIMENSIONS": "768",
    }  # fmt: skip
    searches = Searches(key, users)
    searches.start()
    time.sleep(20)
    searches.switch("during the build (to 768)")
    forward = run(hosted, "reembed", "--no-progress")
    searches.switch("after the switch (768)")
    time.sleep(20)
    searches.switch("during the build (back to 384)")
    back = run(env, "reembed", "--no-progress")
    searches.switch("after the switch back (384)")
    time.sleep(20)
    searches.stop.set()
    searches.join()
    searches.switch("stopped")
    for label, (seconds, rss, out) in (("to fake-768", forward), ("back to local", back)):
        print(f"reembed {label}: {seconds:.1f} s, peak {rss} MB")
        summary.add(f"reembed {label} (its own process)", memories, seconds, "memories")
        for line in out.splitlines():
            if line.startswith(("Built", "Index", "Switched", "Done")):
                print(f"    {line}")
    for phase, samples in searches.samples.items():
        errors = searches.errors.get(phase, {})
        rate = summary.add(f"search, {phase}", len(samples), searches.seconds[phase], "searches")
        print(
            f"search, {phase}: n={len(samples)} {fmt_ms(percentiles(samples))} "
            f"{rate.per_second:.1f} searches/s {errors=}"
        )


if __name__ == "__main__":
    main()
