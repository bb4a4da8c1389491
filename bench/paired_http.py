"""Paired over HTTP: what a change costs the hot path, two servers measured in turn, in one run.

Starts two gunicorn servers (config/gunicorn_conf.py, one worker process each, on free loopback
ports, against the database of .local/engram.env): A from a checkout of --base (a git worktree
made here and removed at the end), B from this working tree — or, with --same-code, both from
this tree, B with the --env-b settings (to price a setting: a pooler, a feature flag). Then
--rounds rounds, each sending one of each request to A and to B in turn (which goes first
alternates), on one keep-alive client per server:

- `GET /v1/ping/` (authentication, throttling, the access-log row);
- `POST /v2/memories/search/` in a scope seeded with --seed memories (embedding, the ranking
  statement, scoring);
- `POST /v1/memories/` with infer=false, one message (embedded and stored in the request);
- with `--kinds …,context`: `POST /v1/context/` with the search's query (one search, the former
  texts, the profile and the summary read, the block rendered).

Prints each server's p50 / p95 / p99 / mean per request, and B - A: the difference of the
medians and the median of the round-by-round differences (the paired figure, which a drift of
the machine's speed moves least). Both servers share the database, so neither has a warmer
cache than the other. The memories go to a project of their own (bench-paired), deleted at the
end.

    .venv/bin/python bench/paired_http.py [--base 55d44fa] [--rounds 400] [--seed 300]
    .venv/bin/python bench/paired_http.py --same-code --env-b ENGRAM_METRICS_TOKEN=... [...]
    .venv/bin/python bench/paired_http.py --same-code --kinds search,context  # what a block costs
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import ROOT, load_local_env, percentiles, sentence
from load import auth, free_port

load_local_env()
BIN = Path(sys.executable).parent
KINDS = ("ping", "search", "add", "context")


def mint_key() -> Any:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request, else
    from tenants.actions import do_create_api_key

    return do_create_api_key(org_name="bench-paired", project_name="bench-paired", name="paired")


class Server:
    """One gunicorn of `checkout`, `env` added to the local settings, on a free port."""

    def __init__(self, name: str, checkout: Path, env: dict[str, str], log: Path) -> None:
        self.name, self.port = name, free_port()
        environment = {
            **os.environ,
            "ENGRAM_API_RATE": "off",
            "ENGRAM_WEB_WORKERS": "1",
            "ENGRAM_LOG_LEVEL": "WARNING",
            **env,
        }
        environment.pop("ENGRAM_METRICS_DIR", None)
        environment.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.output = log.open("w")
        self.process = subprocess.Popen(  # noqa: S603 - our own server
            [str(BIN / "gunicorn"), "-c", "config/gunicorn_conf.py", "--chdir", str(checkout),
             "--bind", f"127.0.0.1:{self.port}"],
            cwd=checkout, env=environment, stdout=self.output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"

    def wait(self, key: str) -> httpx.Client:
        client = httpx.Client(base_url=self.url, headers=auth(key), timeout=30)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with suppress(httpx.HTTPError):
                if client.get("/v1/ping/").status_code == 200:
                    return client
            if self.process.poll() is not None:
                break
            time.sleep(0.3)
        raise SystemExit(f"{self.name} did not start: see {self.output.name}")

    def stop(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=60)
        self.output.close()


def worktree(base: str, stack: ExitStack) -> Path:
    where = Path(tempfile.mkdtemp(prefix="engram-paired-"))
    subprocess.run(  # noqa: S603 - git, on our own repository
        ["git", "worktree", "add", "--detach", "-q", str(where), base],  # noqa: S607
        cwd=ROOT,
        check=True,
    )

    def remove() -> None:
        subprocess.run(  # noqa: S603 - git, on our own repository
            ["git", "worktree", "remove", "--force", str(where)],  # noqa: S607
            cwd=ROOT,
            check=False,
        )
        shutil.rmtree(where, ignore_errors=True)

    stack.callback(remove)
    return where


def shown(env: dict[str, str]) -> str:
    """Settings as printed: a URL's password hidden."""
    hidden = {k: PASSWORD.sub(r"://\1:***@", v) for k, v in env.items()}
    return " ".join(f"{k}={v}" for k, v in hidden.items())


PASSWORD = re.compile(r"://([^:/@]+):[^@]*@")


def one(client: httpx.Client, kind: str, user: str, rng: random.Random, server: str = "") -> float:
    started = time.perf_counter()
    if kind == "ping":
        response = client.get("/v1/ping/")
    elif kind == "search":
        body = {"query": sentence(rng), "filters": {"user_id": user}}
        response = client.post("/v2/memories/search/", json=body)
    elif kind == "context":
        body = {"query": sentence(rng), "user_id": user}
        response = client.post("/v1/context/", json=body)
    else:
        # Each server adds to a scope of its own: the same text twice in one scope would make
        # the second add a duplicate's (another path), the first and second in turn.
        body = {"messages": sentence(rng), "user_id": f"{user}-adds{server}", "infer": False}
        response = client.post("/v1/memories/", json=body)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{kind} -> {response.status_code}: {response.text[:300]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD~1", help="A's commit (default HEAD~1)")
    parser.add_argument("--same-code", action="store_true", help="A and B both from this tree")
    parser.add_argument("--env-b", action="append", default=[], help="KEY=VALUE for B only")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for both")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--seed", type=int, default=300, help="memories in the searched scope")
    parser.add_argument(
        "--kinds",
        default="ping,search,add",
        help=f"requests, in each round's order, of {', '.join(KINDS)} (context: POST /v1/context/)",
    )
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if set(kinds) - set(KINDS):
        parser.error(f"--kinds: one of {', '.join(KINDS)}")
    both = dict(item.split("=", 1) for item in args.env)
    only_b = dict(item.split("=", 1) for item in args.env_b)
    made = mint_key()
    key, user, rng = made.raw, f"paired-{uuid.uuid4().hex[:8]}", random.Random(7)
    logs = Path(tempfile.mkdtemp(prefix="engram-paired-logs-"))
    with ExitStack() as stack:
        a_code = ROOT if args.same_code else worktree(args.base, stack)
        servers = [
            Server("A", a_code, both, logs / "a.log"),
            Server("B", ROOT, {**both, **only_b}, logs / "b.log"),
        ]
        for server in servers:
            stack.callback(server.stop)
        clients = [server.wait(key) for server in servers]
        seeded = [{"role": "user", "content": sentence(rng)} for _ in range(args.seed)]
        for start in range(0, len(seeded), 100):
            body = {"messages": seeded[start : start + 100], "user_id": user, "infer": False}
            clients[0].post("/v1/memories/", json=body, timeout=300).raise_for_status()
        for client in clients:  # warm both: models, connections, caches
            for kind in kinds * 20:
                one(client, kind, user, rng)
        times: dict[tuple[str, str], list[float]] = {(s, k): [] for s in "AB" for k in kinds}
        for round_ in range(args.rounds):
            order = (0, 1) if round_ % 2 == 0 else (1, 0)
            for kind in kinds:
                seed = rng.random()
                for i in order:
                    name = "AB"[i]
                    times[(name, kind)].append(
                        one(clients[i], kind, user, random.Random(seed), name)
                    )
        describe = "this tree" if args.same_code else args.base
        print(f"A: {describe} {shown(both)}; B: this tree {shown({**both, **only_b})}")
        print(f"{args.rounds} rounds; scope of {args.seed} memories; one gunicorn worker each")
        for kind in kinds:
            a, b = times[("A", kind)], times[("B", kind)]
            pa, pb = percentiles(a), percentiles(b)
            paired = sorted(y - x for x, y in zip(a, b, strict=True))[len(a) // 2]
            for name, p in (("A", pa), ("B", pb)):
                row = " ".join(f"{k} {v:7.2f}" for k, v in p.items())
                print(f"  {kind:6} {name}  {row} ms")
            print(
                f"  {kind:6} B-A p50 {pb['p50'] - pa['p50']:+.3f} ms, "
                f"paired median {paired:+.3f} ms"
            )
        for scope in (user, f"{user}-adds", f"{user}-addsA", f"{user}-addsB"):  # deleted
            clients[1].delete("/v1/memories/", params={"user_id": scope}, timeout=300)
    print(f"logs: {logs}")


if __name__ == "__main__":
    main()
