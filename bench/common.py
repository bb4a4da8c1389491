"""Shared helpers for the benchmarks: percentiles, the API client, the target server, and the
run summary every benchmark ends with (throughput per operation kind, peak memory per process
group: RunSummary, PeakMemory)."""

from __future__ import annotations

import math
import os
import random
import resource
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent


def local_env() -> dict[str, str]:
    """The local cluster's settings (.local/engram.env, written by scripts/pg.sh)."""
    path = ROOT / ".local" / "engram.env"
    values: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and name.strip() and not name.lstrip().startswith("#"):
                values[name.strip()] = value.strip().strip("'\"")
    return values


def load_local_env() -> None:
    """The local cluster's settings into the environment, for the benchmarks that use Django
    directly; variables already set win."""
    for name, value in local_env().items():
        os.environ.setdefault(name, value)


def default_host() -> str:
    return os.environ.get("ENGRAM_URL", f"http://127.0.0.1:{os.environ.get('ENGRAM_PORT', '8000')}")


def default_key() -> str | None:
    key = os.environ.get("ENGRAM_API_KEY")
    demo = ROOT / ".local" / "demo_api_key"
    if not key and demo.exists():
        key = demo.read_text().strip()
    return key


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "mean": 0.0}
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {
        "p50": pick(0.50),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "mean": statistics.fmean(ordered),
    }


def fmt_ms(stats: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.2f}ms" for k, v in stats.items())


class Api:
    """An engram API client. A 429 (the per-key rate limit, ENGRAM_API_RATE: other benchmarks
    may share the key) is waited out for its Retry-After and sent again, and counted in
    `throttled`; the latency is the answered request's. Any other error status raises."""

    def __init__(self, host: str, key: str) -> None:
        self.http = httpx.Client(
            base_url=host, headers={"Authorization": f"Token {key}"}, timeout=120
        )
        self.throttled = 0
        self.calls = 0  # answered requests (a 429 sent again counts once)

    def call(self, method: str, path: str, **kwargs: Any) -> tuple[Any, float]:
        while True:
            started = time.perf_counter()
            response = self.http.request(method, path, **kwargs)
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 429:
                break
            self.throttled += 1
            time.sleep(float(response.headers.get("Retry-After") or 1))
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path} -> {response.status_code}: {response.text[:300]}")
        self.calls += 1
        return response.json(), elapsed


# The synthetic memory text generator shared by bench/search.py and bench/scale.py.
WORDS = {
    "verb": [
        "likes",
        "loves",
        "visited",
        "booked",
        "cooked",
        "painted",
        "adopted",
        "studied",
        "bought",
        "planned",
    ],
    "adj": [
        "red",
        "quiet",
        "spicy",
        "ancient",
        "modern",
        "tiny",
        "vegan",
        "italian",
        "rainy",
        "wooden",
    ],
    "noun": [
        "coffee",
        "garden",
        "novel",
        "bicycle",
        "concert",
        "museum",
        "recipe",
        "puppy",
        "marathon",
        "guitar",
    ],
    "place": [
        "Lisbon",
        "Berlin",
        "Kyoto",
        "Austin",
        "Oslo",
        "Lima",
        "Cairo",
        "Perth",
        "Quebec",
        "Seoul",
    ],
}


def sentence(rng: random.Random) -> str:
    w = {k: rng.choice(v) for k, v in WORDS.items()}
    return f"User {w['verb']} the {w['adj']} {w['noun']} in {w['place']} #{rng.randrange(10**6)}"


def user_sizes(memories: int, users: int, exponent: float = 0.8) -> list[int]:
    """Zipf-like sizes: user i gets a share proportional to 1 / (i + 1) ** exponent."""
    weights = [1 / (i + 1) ** exponent for i in range(users)]
    total = sum(weights)
    sizes = [max(1, int(memories * w / total)) for w in weights]
    sizes[0] += memories - sum(sizes)
    return sizes


def wait_for_entity_linking(timeout: float = 1800) -> bool:
    """Until the worker's `entities` queue has nothing queued or being consumed (read through
    DATABASE_URL); False when it still had work after `timeout` seconds or there is no
    DATABASE_URL to read it through. Prints how long it waited."""
    import psycopg

    load_local_env()
    url = os.environ.get("DATABASE_URL")
    if not url:
        print("no DATABASE_URL: not waiting for entity linking")
        return False
    started = time.perf_counter()
    done = False
    with psycopg.connect(url, autocommit=True) as conn:
        while time.perf_counter() - started < timeout:
            row = conn.execute(
                "SELECT count(*) FROM dramatiq.queue WHERE queue_name = 'entities' "
                "AND state IN ('queued', 'consumed')"
            ).fetchone()
            if row is not None and row[0] == 0:
                done = True
                break
            time.sleep(1)
    waited = time.perf_counter() - started
    print(
        f"entity linking done after {waited:.0f}s of waiting"
        if done
        else f"entity linking NOT done after {waited:.0f}s of waiting: searching anyway"
    )
    return done


# --- the run summary: throughput per operation kind, peak memory per process group ---------

MIB = 2**20
DEFAULT_DATABASE_PORT = 5433  # the local cluster's (scripts/pg.sh)
CHILDREN = "children of the benchmark"


class Snapshot:
    """The machine's processes at one moment (pid -> parent pid, name, arguments), and, read on
    first use, which pids listen on which TCP port."""

    def __init__(self) -> None:
        self.processes: dict[int, tuple[int, str, tuple[str, ...]]] = {}
        for process in psutil.process_iter(["ppid", "name", "cmdline"]):
            info = process.info
            self.processes[process.pid] = (
                info["ppid"] or 0,
                info["name"] or "",
                tuple(info["cmdline"] or ()),
            )
        self._listeners: dict[int, set[int | None]] | None = None
        self._listed = False

    def listening(self, port: int) -> list[int] | None:
        """The pids listening on TCP `port`: [] when none does, None when the system will not
        say which (listing other users' sockets needs privileges on some systems)."""
        if not self._listed:
            self._listeners, self._listed = listeners(), True
        if self._listeners is None:
            return None
        pids = self._listeners.get(port, set())
        if None in pids:
            return None
        return sorted(p for p in pids if p is not None)

    def descendants(self, roots: Iterable[int]) -> list[int]:
        """`roots` (those still running) and all their descendants, roots first."""
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in self.processes.items():
            children.setdefault(ppid, []).append(pid)
        found = [pid for pid in dict.fromkeys(roots) if pid in self.processes]
        seen = set(found)
        for pid in found:  # grows while iterated: breadth first
            for child in children.get(pid, ()):
                if child not in seen:
                    seen.add(child)
                    found.append(child)
        return found


def listeners() -> dict[int, set[int | None]] | None:
    """TCP port -> the pids listening on it (None among them: a listener the system will not
    name, as another user's socket without privileges); None when the list is refused."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    found: dict[int, set[int | None]] = {}
    for c in connections:
        if c.status == psutil.CONN_LISTEN and c.laddr:
            found.setdefault(c.laddr.port, set()).add(c.pid)
    return found


# A process group's roots in a snapshot (their descendants belong to the group too).
Finder = Callable[[Snapshot], list[int]]


def by_pid(pid: int) -> Finder:
    return lambda snapshot: [pid] if pid in snapshot.processes else []


def by_port(port: int) -> Finder:
    """The processes listening on `port` (nothing when the system will not say), each from its
    topmost ancestor with the same command line: a pre-forking server's workers share the
    master's socket, and the system names one of them as its listener."""

    def find(snapshot: Snapshot) -> list[int]:
        roots = []
        for listener in snapshot.listening(port) or []:
            root = listener
            ppid, _, args = snapshot.processes[root]
            while ppid in snapshot.processes and snapshot.processes[ppid][2] == args:
                root, (ppid, _, _) = ppid, snapshot.processes[ppid]
            roots.append(root)
        return roots

    return find


def by_program(program: str) -> Finder:
    """Processes one of whose arguments is `program` or a path to it (`.venv/bin/dramatiq`,
    `python -m dramatiq`), not this one."""

    def find(snapshot: Snapshot) -> list[int]:
        return [
            pid
            for pid, (_, _, args) in snapshot.processes.items()
            if pid != os.getpid() and any(Path(a).name == program for a in args)
        ]

    return find


def postgres_on(port: int) -> Finder:
    """The postmaster listening on `port`; when the system will not say who listens, every
    postmaster (a `postgres` process whose parent is not one: possibly another cluster)."""

    def find(snapshot: Snapshot) -> list[int]:
        listening = snapshot.listening(port)
        if listening is not None:
            return listening
        names = {pid: name for pid, (_, name, _) in snapshot.processes.items()}
        return [
            pid
            for pid, (ppid, name, _) in snapshot.processes.items()
            if name == "postgres" and names.get(ppid) != "postgres"
        ]

    return find


def this_process(snapshot: Snapshot) -> list[int]:
    return [os.getpid()]


def own_children(snapshot: Snapshot) -> list[int]:
    return [pid for pid, (ppid, _, _) in snapshot.processes.items() if ppid == os.getpid()]


def database_port() -> int:
    """The port of DATABASE_URL (the environment's, else .local/engram.env's)."""
    url = os.environ.get("DATABASE_URL") or local_env().get("DATABASE_URL")
    if not url:
        return DEFAULT_DATABASE_PORT
    return urlsplit(url).port or 5432


def is_local(hostname: str) -> bool:
    if hostname in ("", "localhost", "0.0.0.0", "::", socket.gethostname()):  # noqa: S104
        return True
    if hostname.startswith("127.") or hostname == "::1":
        return True
    addresses = {a.address for nic in psutil.net_if_addrs().values() for a in nic}
    return hostname in addresses


def server_finders(*hosts: str | None) -> dict[str, Finder]:
    """One group per server URL (its listening processes, when it is on this machine)."""
    groups: dict[str, Finder] = {}
    ports: set[int] = set()
    for host in dict.fromkeys(h for h in hosts if h):
        parts = urlsplit(host)
        hostname = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if not is_local(hostname):
            groups[f"web server {parts.netloc} (not this machine)"] = lambda _: []
        elif port not in ports:
            ports.add(port)
            groups[f"web server {parts.netloc}"] = by_port(port)
    return groups


def standard_finders(*hosts: str | None) -> dict[str, Finder]:
    """The groups of a benchmark run: the web server(s) at `hosts`, the Dramatiq worker, the
    PostgreSQL cluster of DATABASE_URL, this process and its other children."""
    port = database_port()
    return {
        **server_finders(*hosts),
        "worker (dramatiq)": by_program("dramatiq"),
        f"postgres :{port}": postgres_on(port),
        # Before the client: its descendants not in a group above are the children's.
        CHILDREN: own_children,
        f"benchmark client (pid {os.getpid()})": this_process,
    }


@dataclass
class ProcessPeak:
    """One process's peaks, in MiB (PSS only when the sampler reads it)."""

    group: str
    pid: int
    root: bool
    rss: float = 0.0
    pss: float = 0.0


@dataclass
class GroupPeak:
    """A group's peak: its processes' summed RSS at one sample (MiB), its largest process and
    the most processes it had at once."""

    total: float = 0.0
    largest: float = 0.0
    processes: int = 0


class PeakMemory(threading.Thread):
    """Every `interval` seconds, the RSS (and with pss=True the PSS) of each process of each
    group, a group being the processes its finder names and their descendants (a process in
    two groups counts in the first); keeps each process's peak, each group's peak total, and
    the CPU seconds each group spent since the first sample. The groups are looked up again
    every `rescan` seconds (a scan of /proc and of the TCP listeners, ~15 ms), the memory read
    at every sample (~50 us a process)."""

    def __init__(
        self,
        groups: dict[str, Finder],
        *,
        interval: float = 1.0,
        rescan: float = 2.0,
        pss: bool = False,
    ) -> None:
        super().__init__(daemon=True, name="peak-memory")
        self.groups, self.interval, self.rescan, self.pss = groups, interval, rescan, pss
        self.halt = threading.Event()
        self.members: dict[int, tuple[str, bool]] = {}  # pid -> (group, is one of its roots)
        self.handles: dict[int, psutil.Process] = {}
        self.processes: dict[int, ProcessPeak] = {}
        self.peaks = {name: GroupPeak() for name in groups}
        # pid -> (group, CPU seconds at the first sample or 0 for a process started since, last)
        self.cpu: dict[int, tuple[str, float, float]] = {}
        self.first = True
        self.scanned = -math.inf

    @classmethod
    def around(cls, *hosts: str | None, **options: Any) -> PeakMemory:
        """The standard groups (standard_finders) of a run against `hosts`."""
        return cls(standard_finders(*hosts), **options)

    def find(self) -> None:
        snapshot = Snapshot()
        members: dict[int, tuple[str, bool]] = {}
        for name, finder in self.groups.items():
            roots = set(finder(snapshot))
            for pid in snapshot.descendants(roots):
                members.setdefault(pid, (name, pid in roots))
        self.members = members
        self.scanned = time.monotonic()

    def read(self, pid: int) -> tuple[float, float, float] | None:
        """(RSS MiB, PSS MiB or 0, CPU seconds) of `pid`; None when it is gone."""
        try:
            handle = self.handles.get(pid) or psutil.Process(pid)
            self.handles[pid] = handle
            times = handle.cpu_times()
            try:
                info = handle.memory_full_info() if self.pss else handle.memory_info()
            except psutil.AccessDenied:  # PSS of another user's process
                info = handle.memory_info()
        except psutil.Error:
            self.handles.pop(pid, None)
            return None
        return info.rss / MIB, getattr(info, "pss", 0) / MIB, times.user + times.system

    def note(self, pid: int, group: str, root: bool, sizes: tuple[float, float, float]) -> None:
        rss, pss, cpu = sizes
        peak = self.processes.setdefault(pid, ProcessPeak(group, pid, root))
        peak.group, peak.root = group, root  # a process can move (found by a later rescan)
        peak.rss, peak.pss = max(peak.rss, rss), max(peak.pss, pss)
        _, start, _ = self.cpu.get(pid, (group, cpu if self.first else 0.0, 0.0))
        self.cpu[pid] = (group, start, cpu)

    def sample(self) -> None:
        if time.monotonic() - self.scanned >= self.rescan:
            self.find()
        totals: dict[str, list[float]] = {}
        for pid, (group, root) in list(self.members.items()):
            sizes = self.read(pid)
            if sizes is not None:
                self.note(pid, group, root, sizes)
                totals.setdefault(group, []).append(sizes[0])
        for group, values in totals.items():
            peak = self.peaks[group]
            peak.total = max(peak.total, sum(values))
            peak.largest = max(peak.largest, *values)
            peak.processes = max(peak.processes, len(values))
        self.first = False

    def run(self) -> None:
        self.sample()
        while not self.halt.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        """Stop sampling, after one last sample."""
        if self.is_alive():
            self.halt.set()
            self.join()
        self.scanned = -math.inf  # the processes as they are now
        self.sample()

    def cpu_seconds(self) -> dict[str, float]:
        spent: dict[str, float] = {}
        for group, start, last in self.cpu.values():
            spent[group] = spent.get(group, 0.0) + last - start
        return spent


@dataclass
class Rate:
    """`count` operations of one kind (`unit`: searches, memories, ...) in `seconds` of wall
    time: the phase of the run that did them."""

    label: str
    unit: str
    count: int = 0
    seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"  {self.label:<44}{self.count:>8} {self.unit} in {self.seconds:8.1f} s = "
            f"{self.per_second:9.1f} {self.unit}/s"
        )


def memory_line(name: str, peak: GroupPeak, cpu: float) -> str:
    if not peak.processes:
        return f"  {name}: {'none' if name == CHILDREN else 'not found locally'}"
    plural = "process" if peak.processes == 1 else "processes"
    line = (
        f"  {name:<44}{peak.processes:>3} {plural:<10} peak {peak.total:8.1f}  "
        f"largest {peak.largest:8.1f}  CPU {cpu:7.1f} s"
    )
    if name.startswith("benchmark client"):
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        line += f"  (its high-water mark {own:.1f})"
    return line


def print_run_summary(rates: list[Rate], memory: PeakMemory, elapsed: float) -> None:
    """The block every benchmark ends with: the count, wall seconds and throughput of each
    timed operation kind, and the peak RSS of each process group."""
    print(f"-- run summary: {elapsed:.1f} s elapsed")
    print("throughput (operations / wall seconds of the phase that ran them):")
    for rate in rates:
        print(rate.line())
    print(
        f"peak memory, RSS in MiB (sampled every {memory.interval:g} s; a group's peak is the "
        "sum over its processes at one sample, shared pages counted in each):"
    )
    cpu = memory.cpu_seconds()
    for name, peak in memory.peaks.items():
        print(memory_line(name, peak, cpu.get(name, 0.0)))


class RunSummary:
    """What a benchmark prints at its end (issue #29): starts a PeakMemory sampler at once;
    `phase` (or `add`) records each timed operation kind; `report` prints the block."""

    def __init__(self, memory: PeakMemory) -> None:
        self.memory = memory
        self.rates: list[Rate] = []
        self.started = time.perf_counter()
        memory.start()

    @classmethod
    def start(cls, *hosts: str | None, **options: Any) -> RunSummary:
        """Sampling the standard groups of a run against `hosts` (PeakMemory.around)."""
        return cls(PeakMemory.around(*hosts, **options))

    def add(self, label: str, count: int, seconds: float, unit: str) -> Rate:
        rate = Rate(label, unit, count, seconds)
        self.rates.append(rate)
        return rate

    @contextmanager
    def phase(self, label: str, unit: str) -> Iterator[Rate]:
        """Times the block's wall seconds; the block sets (or adds to) the Rate's count."""
        rate = Rate(label, unit)
        started = time.perf_counter()
        try:
            yield rate
        finally:
            rate.seconds = time.perf_counter() - started
            self.rates.append(rate)

    def report(self) -> None:
        self.memory.stop()
        print_run_summary(self.rates, self.memory, time.perf_counter() - self.started)
