"""Two tenants on one server: an ordinary one's latency while another keeps slow requests going.

Starts gunicorn itself (config/gunicorn_conf.py, on a free loopback port and the database of
.local/engram.env), twice: once as engram served before issue #47 (one thread per web process,
no limit on slow requests, no request budget: BEFORE) and once at the defaults. In each, for
--duration seconds per phase:

- **alone:** tenant B's --clients clients in a closed loop (keep-alive, as the SDKs), 80 %
  searches and 20 % adds (infer=false) in a scope seeded with --seed memories;
- **abused:** the same, while tenant A's --abusers clients each send, in a closed loop and each
  on a new connection, an update of a memory whose row another session holds locked: each
  waits out the API's lock_timeout (2 s by default) and answers 503 — a request that is slow
  without costing the server any CPU, as the hostile review's deadline-long requests were.

Prints B's p50 / p95 / p99 / mean / max per request type in both phases, A's answers by
status, and the peak RSS of the web server's processes. Keys for two projects of their own are minted in the
local database (bench-noisy-a / -b); their memories are deleted at the end.

    .venv/bin/python bench/noisy_neighbour.py [--duration 30] [--clients 2] [--abusers 8]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (
    ROOT,
    PeakMemory,
    by_pid,
    fmt_ms,
    load_local_env,
    memory_line,
    percentiles,
    sentence,
)
from load import auth, free_port

load_local_env()
BIN = Path(sys.executable).parent
# engram as it was served before #47: one thread per web process, nothing held back.
BEFORE = {
    "ENGRAM_WEB_THREADS": "1",
    "ENGRAM_API_REQUEST_BUDGET_MS": "0",
    "ENGRAM_API_KEY_SLOW_REQUESTS": "1000",
    "ENGRAM_API_PROJECT_SLOW_REQUESTS": "1000",
}


def mint_keys() -> tuple[Any, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from tenants.actions import do_create_api_key

    a = do_create_api_key(org_name="bench-noisy", project_name="bench-noisy-a", name="abuser")
    b = do_create_api_key(org_name="bench-noisy", project_name="bench-noisy-b", name="ordinary")
    return a, b


class LockedRow(threading.Thread):
    """Holds one of tenant A's memories locked (FOR UPDATE) until stopped."""

    def __init__(self, project_id: uuid.UUID, memory_id: str) -> None:
        super().__init__(daemon=True)
        self.project_id, self.memory_id = project_id, memory_id
        self.locked, self.release = threading.Event(), threading.Event()

    def run(self) -> None:
        from django.db import connection

        from memory.models import Memory
        from tenants.db import project_context

        with project_context(self.project_id):
            list(Memory.objects.select_for_update().filter(pk=self.memory_id))
            self.locked.set()
            while not self.release.wait(5):  # keep the session from idling out
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1")
        connection.close()


class Server:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.host = f"http://127.0.0.1:{self.port}"
        environ = {**os.environ, "ENGRAM_API_RATE": "off", "ENGRAM_LOG_LEVEL": "WARNING", **env}
        self.log = log.open("w")
        self.process = subprocess.Popen(  # noqa: S603 - our own command
            [str(BIN / "gunicorn"), "-c", "config/gunicorn_conf.py", "--bind", f"127.0.0.1:{self.port}"],
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


def ordinary(host: str, key: str, user: str, until: float, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    timings: dict[str, list[float]] = {"search": [], "add": []}
    with httpx.Client(base_url=host, headers=auth(key), timeout=60) as http:
        while time.monotonic() < until:
            if rng.random() < 0.8:
                kind, path = "search", "/v2/memories/search/"
                body: dict[str, Any] = {"query": sentence(rng), "filters": {"user_id": user}}
            else:
                kind, path = "add", "/v1/memories/"
                body = {"messages": [{"role": "user", "content": sentence(rng)}],
                        "user_id": user, "infer": False}  # fmt: skip
            started = time.perf_counter()
            response = http.post(path, json=body)
            timings[kind].append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise SystemExit(f"tenant B: {path} -> {response.status_code}: {response.text}")
    return timings


def abuser(
    host: str, key: str, memory_id: str, until: float, statuses: collections.Counter[int]
) -> None:
    """Tenant A's client: a new connection for every request (no keep-alive), so that its
    requests reach every web process, as a client with many connections would."""
    while time.monotonic() < until:
        with httpx.Client(base_url=host, headers=auth(key), timeout=60) as http:
            response = http.put(f"/v1/memories/{memory_id}/", json={"text": "changed"})
        statuses[response.status_code] += 1
        if response.status_code == 429:  # as a client that honours Retry-After would
            time.sleep(float(response.headers.get("Retry-After") or 1))


def phase(
    host: str, b_key: str, user: str, args: argparse.Namespace, abuse: Any = None
) -> tuple[dict[str, list[float]], collections.Counter[int]]:
    """Tenant B's clients for --duration seconds, with tenant A's abusers if `abuse` is given
    (A's key and locked memory); B's timings by request type, and A's answers by status."""
    until = time.monotonic() + args.duration
    statuses: collections.Counter[int] = collections.Counter()
    abusers = []
    if abuse is not None:
        abusers = [
            threading.Thread(target=abuser, args=(host, *abuse, until, statuses))
            for _ in range(args.abusers)
        ]
        for thread in abusers:
            thread.start()
        time.sleep(0.5)  # the abuse under way
    results: list[dict[str, list[float]]] = []
    clients = [
        threading.Thread(target=lambda n=n: results.append(ordinary(host, b_key, user, until, n)))
        for n in range(args.clients)
    ]
    for thread in clients:
        thread.start()
    for thread in clients + abusers:
        thread.join()
    merged: dict[str, list[float]] = {"search": [], "add": []}
    for result in results:
        for kind, values in result.items():
            merged[kind] += values
    return merged, statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30, help="seconds per phase (30)")
    parser.add_argument("--clients", type=int, default=2, help="tenant B's clients (2)")
    parser.add_argument("--abusers", type=int, default=8, help="tenant A's clients (8)")
    parser.add_argument("--seed", type=int, default=40, help="tenant B's memories (40)")
    parser.add_argument("--only", choices=["before", "after"], help="run one configuration")
    args = parser.parse_args()
    a, b = mint_keys()
    run = uuid.uuid4().hex[:8]
    a_user, b_user = f"noisy-a-{run}", f"noisy-b-{run}"
    log_dir = Path(tempfile.mkdtemp(prefix="engram-noisy-"))
    configurations = [("before #47", BEFORE), ("now (defaults)", {})]
    if args.only:
        configurations = [configurations[0 if args.only == "before" else 1]]
    for label, env in configurations:
        server = Server(env, log_dir / f"noisy-{run}.log")
        memory = PeakMemory({"web": by_pid(server.process.pid)}, interval=1.0)
        try:
            server.wait_ready(b.raw)
            memory.start()
            with httpx.Client(base_url=server.host, timeout=120) as http:
                for n in range(args.seed):
                    body = {"messages": [{"role": "user", "content": sentence(random.Random(n))}],
                            "user_id": b_user, "infer": False}  # fmt: skip
                    http.post("/v1/memories/", json=body, headers=auth(b.raw)).raise_for_status()
                body = {"messages": [{"role": "user", "content": "I keep bees."}],
                        "user_id": a_user, "infer": False}  # fmt: skip
                added = http.post("/v1/memories/", json=body, headers=auth(a.raw))
                stored = added.json()
                memory_id = (stored["results"] if isinstance(stored, dict) else stored)[0]["id"]
            alone, _ = phase(server.host, b.raw, b_user, args)
            lock = LockedRow(a.key.project_id, memory_id)
            lock.start()
            lock.locked.wait(30)
            abused, statuses = phase(server.host, b.raw, b_user, args, abuse=(a.raw, memory_id))
            lock.release.set()
            lock.join(30)
            for key, user in ((a, a_user), (b, b_user)):
                httpx.delete(f"{server.host}/v1/memories/", params={"user_id": user},
                             headers=auth(key.raw), timeout=120)  # fmt: skip
        finally:
            memory.stop()
            server.stop()
        print(
            f"\n{label}: {' '.join(f'{k}={v}' for k, v in env.items()) or 'ENGRAM_WEB_THREADS=4'}"
        )
        for name, timings in (("alone", alone), ("abused", abused)):
            for kind in ("search", "add"):
                print(
                    f"  tenant B {kind:6} {name:6} n={len(timings[kind]):4}  {fmt_ms(percentiles(timings[kind]))}"
                )
        print(f"  tenant A answers: {dict(sorted(statuses.items()))}")
        cpu = memory.cpu_seconds()
        for name, peak in memory.peaks.items():
            print(memory_line(f"peak RSS (MiB) of the {name} server", peak, cpu.get(name, 0.0)))
    print(
        f"\ncommand: {' '.join(sys.argv)}; {args.clients} B clients, {args.abusers} A clients, {args.duration:g} s per phase"
    )


if __name__ == "__main__":
    main()
