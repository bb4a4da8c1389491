"""Concurrent load: 16 clients mixing search (80 %) and add (20 %) against the production
process model, with locust (bench/locustfile.py).

By default the script starts that process model itself, on a free loopback port and the
database of .local/engram.env (or the environment): gunicorn with config/gunicorn_conf.py
(ENGRAM_WEB_WORKERS x ENGRAM_WEB_THREADS, keep-alive) and one Dramatiq worker
(`dramatiq config.worker --processes 1 --threads 2`, as `make run`), both with
ENGRAM_API_RATE=off (16 clients in a closed loop pass the default 1200 requests/minute per key
within seconds). With --host it uses a running server instead (start it with
ENGRAM_API_RATE=off; pass --pids to have its processes' memory sampled).

It seeds --users scopes with --seed memories each (infer=false), runs the clients for
--duration seconds (no think time: each client sends its next request when the answer came),
and prints the throughput, p50/p95/p99 per request type, the error count, the CPU time per
request (web workers and postgres: the floor under the throughput) and the peak memory
(RSS and PSS) of each process, sampled every second. Any failed request makes it exit 1.
The seeded and added memories are deleted at the end (an infer=true add the worker finishes
after that may leave a memory in its scope, under user id "load-<run>-N").

    .venv/bin/python bench/load.py [--duration 120] [--clients 16] [--users 16] [--seed 40]
                                   [--host http://127.0.0.1:8000 --pids 123,124]

Another engram worker on the same database (`make run`'s) takes messages from the same queue:
the infer=true adds may be extracted there. Locust's own client shares the machine with the server: on 2 cores it takes part of the CPU
the figures are about (its process is sampled too).
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import suppress
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (
    ROOT,
    PeakMemory,
    ProcessPeak,
    by_pid,
    database_port,
    default_key,
    load_local_env,
    postgres_on,
)

load_local_env()
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Stack:
    """gunicorn and one Dramatiq worker, each in its own process group."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "ENGRAM_API_RATE": "off", "ENGRAM_LOG_LEVEL": "WARNING"}
        self.logs = [(log_dir / name).open("w") for name in ("gunicorn.log", "worker.log")]
        commands = [
            [str(BIN / "gunicorn"), "-c", "config/gunicorn_conf.py",
             "--bind", f"127.0.0.1:{self.port}"],
            [str(BIN / "dramatiq"), "config.worker", "--processes", "1", "--threads", "2"],
        ]  # fmt: skip
        self.processes = [
            subprocess.Popen(  # noqa: S603 - our own commands
                command,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            for command, log in zip(commands, self.logs, strict=True)
        ]
        self.host = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, key: str) -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            for process, log in zip(self.processes, self.logs, strict=True):
                if process.poll() is not None:
                    raise SystemExit(f"a server process exited; see {log.name}")
            with suppress(httpx.HTTPError):
                reply = httpx.get(f"{self.host}/v1/ping/", headers=auth(key), timeout=5)
                if reply.status_code == 200:
                    return
            time.sleep(0.5)
        raise SystemExit(f"the server did not answer within 90 s; see {self.logs[0].name}")

    def stop(self) -> None:
        for process in self.processes:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Token {key}"}


def sampler(roots: dict[str, int]) -> PeakMemory:
    """Every second: RSS and PSS of each watched process and its children, and of the cluster's
    postgres processes, with the CPU time each group spent (common.PeakMemory)."""
    groups = {name: by_pid(pid) for name, pid in roots.items()}
    return PeakMemory({**groups, "postgres": postgres_on(database_port())}, rescan=1.0, pss=True)


def process_label(peak: ProcessPeak) -> str:
    if peak.root:
        return f"{peak.group} (pid {peak.pid})" if peak.group != "gunicorn" else "gunicorn master"
    return f"{peak.group} child pid {peak.pid}"


def report_memory(memory: PeakMemory) -> None:
    print("peak memory per process (MiB):")
    rows = [(process_label(p), p) for p in memory.processes.values() if p.group != "postgres"]
    for label, peak in sorted(rows, key=lambda row: row[0]):
        print(f"  {label:<32} RSS {peak.rss:7.1f}  PSS {peak.pss:7.1f}")


def seed(host: str, key: str, run: str, users: int, per_user: int) -> None:
    with httpx.Client(base_url=host, headers=auth(key), timeout=120) as client:
        for user in range(users):
            messages = [
                {"role": "user", "content": f"Note {i}: I enjoy topic {(user * 7 + i) % 23}."}
                for i in range(per_user)
            ]
            body = {"messages": messages, "user_id": f"{run}-{user}", "infer": False}
            client.post("/v1/memories/", json=body).raise_for_status()


def clean(host: str, key: str, run: str, users: int) -> None:
    with httpx.Client(base_url=host, headers=auth(key), timeout=120) as client:
        for user in range(users):
            client.delete(f"/v1/memories/?user_id={run}-{user}")


def start_locust(
    host: str, key: str, run: str, args: argparse.Namespace, prefix: Path
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ENGRAM_API_KEY": key, "ENGRAM_LOAD_RUN": run,
           "ENGRAM_LOAD_USERS": str(args.users)}  # fmt: skip
    command = [
        str(BIN / "locust"), "-f", str(ROOT / "bench" / "locustfile.py"), "--headless",
        "-u", str(args.clients), "-r", str(args.clients), "-t", f"{args.duration}s",
        "-H", host, "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING",
        "--exit-code-on-error", "0",
    ]  # fmt: skip
    return subprocess.Popen(  # noqa: S603 - our own command
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(prefix.parent / "locust.log").open("w"),
    )


def report(prefix: Path, duration: int) -> tuple[int, int]:
    """Print the table; returns (failed requests, all requests)."""
    with open(f"{prefix}_stats.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    errors = total = 0
    print(f"{'request':<18}{'count':>8}{'req/s':>8}{'p50':>8}{'p95':>8}{'p99':>8}{'max':>8}"
          f"{'errors':>8}")  # fmt: skip
    for row in rows:
        name = row["Name"] if row["Name"] != "Aggregated" else "all"
        count, failed = int(row["Request Count"]), int(row["Failure Count"])
        if name != "all":
            errors += failed
            total += count
        print(f"{name:<18}{count:>8}{count / duration:>8.1f}{row['50%']:>6}ms{row['95%']:>6}ms"
              f"{row['99%']:>6}ms{float(row['Max Response Time']):>6.0f}ms{failed:>8}")  # fmt: skip
    with open(f"{prefix}_failures.csv", newline="") as handle:
        for failure in csv.DictReader(handle):
            print(f"FAILED {failure['Occurrences']}x {failure['Method']} {failure['Name']}: "
                  f"{failure['Error'][:300]}")  # fmt: skip
    return errors, total


def report_cpu(spent: dict[str, float], total: int) -> None:
    print(
        "CPU seconds during the load: "
        + ", ".join(f"{group} {seconds:.1f}" for group, seconds in sorted(spent.items()))
    )
    server = sum(v for k, v in spent.items() if k not in ("locust", "dramatiq"))
    cores = os.cpu_count() or 1
    print(
        f"web and database CPU per request: {server * 1000 / max(total, 1):.1f} ms "
        f"(so at most {cores} x 1000 / that requests/s on {cores} cores to themselves)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )  # fmt: skip
    parser.add_argument("--duration", type=int, default=120, help="seconds of load (120)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (16)")
    parser.add_argument("--users", type=int, default=16, help="scopes (user ids) to spread over")
    parser.add_argument("--seed", type=int, default=40, help="memories seeded per scope")
    parser.add_argument("--host", help="a running server (else the script starts one)")
    parser.add_argument("--pids", default="", help="with --host: comma-separated pids to sample")
    parser.add_argument("--key", default=default_key())
    args = parser.parse_args()
    if not args.key:
        parser.error("no API key: pass --key or set ENGRAM_API_KEY")
    run = f"load-{uuid.uuid4().hex[:8]}"
    workdir = Path(tempfile.mkdtemp(prefix="engram-load-"))
    stack = None if args.host else Stack(workdir)
    try:
        if stack is not None:
            stack.wait_ready(args.key)
            roots = {"gunicorn": stack.processes[0].pid, "dramatiq": stack.processes[1].pid}
        else:
            roots = {f"pid {pid}": int(pid) for pid in args.pids.split(",") if pid}
        host = args.host or (stack.host if stack else "")
        seed(host, args.key, run, args.users, args.seed)
        load_before = os.getloadavg()
        started = time.monotonic()
        locust = start_locust(host, args.key, run, args, workdir / "locust")
        memory = sampler({**roots, "locust": locust.pid})
        memory.start()
        if locust.wait() != 0:
            raise SystemExit(f"locust exited with {locust.returncode}")
        elapsed = time.monotonic() - started
        memory.stop()
        load_after = os.getloadavg()
        print(
            f"{args.clients} clients, {args.duration} s (locust ran {elapsed:.0f} s incl. start), "
            f"{args.users} scopes x {args.seed} seeded memories; {os.cpu_count()} cpus; "
            f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)"
        )
        errors, total = report(workdir / "locust", args.duration)
        report_cpu(memory.cpu_seconds(), total)
        report_memory(memory)
        clean(host, args.key, run, args.users)
    finally:
        if stack is not None:
            stack.stop()
    if errors:
        print(f"ERROR: {errors} failed requests (must be zero)", file=sys.stderr)
        raise SystemExit(1)
    print("errors: 0")


if __name__ == "__main__":
    main()
