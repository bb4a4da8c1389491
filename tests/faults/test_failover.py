"""Failover, rehearsed (issue #51, part 5; docs/operations.md, Failover): a private primary with a
streaming standby, engram pointed at both through one URL (`host1,host2` with
target_session_attrs=read-write), a real gunicorn, Dramatiq worker and sweeper; the primary is
stopped hard (`pg_ctl stop -m immediate`: no checkpoint, every connection cut) while clients
add (raw and for extraction) and search, and the standby is promoted.

What must hold: during the switch every request answers, 200 or 503 with `detail` and
Retry-After, none hangs; once the standby is promoted the server and the worker go on with no
change of settings; with synchronous replication no acknowledged add is missing on the new
primary and every add queued for extraction completes, none stuck. With asynchronous replication
the same, except that acknowledged adds may be missing: how many is measured and printed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from config.exceptions import DEADLINE_DETAIL, UNAVAILABLE_DETAIL
from tests.faults.db_cluster import (
    APP,
    BIN,
    DB,
    PG_BIN,
    ROOT,
    PrivateCluster,
    Server,
    _as_postgres,
    app_env,
    free_port,
    migrate_and_mint_key,
)
from tests.faults.test_database_faults import (
    CLIENT_TIMEOUT,
    Outcomes,
    Stack,
    needs_root_tools,
    run_clients,
    wait_for_success,
)

pytestmark = [needs_root_tools, pytest.mark.faults]

STANDBY_NAME = "engram_standby"
# An event held by a worker whose database went away is taken over once its lease ends.
LEASE_SECONDS = "8"


class Standby:
    """A streaming physical standby of `primary` (pg_basebackup -R), on its own port."""

    def __init__(self, primary: PrivateCluster) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="engram-standby-"))
        self.data = self.home / "data"
        self.port = free_port()
        self.log = self.home / "postgres.log"
        if os.geteuid() == 0:
            shutil.chown(self.home, "postgres", "postgres")
        self.home.chmod(0o700)
        conninfo = (
            f"host={primary.home} port={primary.port} user=postgres application_name={STANDBY_NAME}"
        )
        run(
            PG_BIN / "pg_basebackup", "-D", self.data, "-d", conninfo, "-R", "-X", "stream",
            "-c", "fast", f"--tablespace-mapping={primary.volume}={self.home / 'volume'}",
        )  # fmt: skip
        # Its own address; and no synchronous standby of its own once promoted, else every
        # commit would wait for one that does not exist (the procedure says the same).
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {self.port}\nunix_socket_directories = '{self.home}'\n"
                "synchronous_standby_names = ''\n"
            )

    def start(self) -> None:
        run(PG_BIN / "pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60", "start")

    def promote(self) -> None:
        run(PG_BIN / "pg_ctl", "-D", self.data, "-w", "-t", "60", "promote")

    def sql(self, statement: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        with (
            psycopg.connect(host=str(self.home), port=self.port, user="postgres", dbname=DB,
                            autocommit=True) as conn,
            conn.cursor() as cursor,
        ):  # fmt: skip
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            run(PG_BIN / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.home, ignore_errors=True)


def run(*command: str | Path) -> None:
    subprocess.run(_as_postgres(*command), check=True, capture_output=True, timeout=120)


def background(env: dict[str, str], log: Path, *command: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as output:
        return subprocess.Popen(
            list(command), cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def stop_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@dataclass
class Pair:
    primary: PrivateCluster
    standby: Standby
    stack: Stack
    events: dict[str, float] = field(default_factory=dict)  # acknowledged event id -> when
    lag: str = ""  # the standby's lag behind the primary just before it went (pg_stat_replication)
    event_errors: list[str] = field(default_factory=list)


@contextlib.contextmanager
def primary_and_standby(synchronous: bool) -> Iterator[Pair]:
    primary = PrivateCluster("wal_level = replica\nmax_wal_senders = 4\nwal_keep_size = '256MB'\n")
    standby: Standby | None = None
    processes: list[subprocess.Popen[bytes]] = []
    server: Server | None = None
    try:
        primary.initdb()
        primary.start()
        primary.bootstrap()
        key = migrate_and_mint_key(primary, app_env(primary))
        standby = Standby(primary)
        standby.start()
        if synchronous:  # once it streams: before, every commit would wait for it
            primary.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            primary.sql("SELECT pg_reload_conf()")
        state = "sync" if synchronous else "async"
        deadline = time.monotonic() + 60
        while primary.sql("SELECT sync_state FROM pg_stat_replication") != [(state,)]:
            assert time.monotonic() < deadline, "the standby did not start streaming"
            time.sleep(0.2)
        both = (
            f"postgresql://{APP}:{primary.app_password}@127.0.0.1:{primary.port},"
            f"127.0.0.1:{standby.port}/{DB}?target_session_attrs=read-write"
        )
        # (A loaded 2-core machine makes some requests slow: no slow-request limit here.)
        env = app_env(primary, DATABASE_URL=both, ENGRAM_EVENT_LEASE_SECONDS=LEASE_SECONDS,
                      ENGRAM_DB_CONNECT_TIMEOUT="2", ENGRAM_API_SLOW_MS="60000")  # fmt: skip
        env.pop("ANTHROPIC_API_KEY", None)  # the offline extractor
        server = Server(env, primary.home)
        processes.append(
            background(env, primary.home / "worker.log", str(BIN / "dramatiq"), "config.worker",
                       "--processes", "1", "--threads", "2")
        )  # fmt: skip
        processes.append(
            background(env, primary.home / "sweeper.log", str(BIN / "python"), "manage.py",
                       "sweep_events", "--loop", "2", "--pending-seconds", "5", "-v", "0")
        )  # fmt: skip
        server.wait_ready(key)
        yield Pair(primary, standby, Stack(primary, server, key))
    finally:
        for process in processes:
            stop_group(process)
        if server is not None:
            server.stop()
        if standby is not None:
            standby.remove()
        primary.remove()


def queue_adds(pair: Pair, stop: threading.Event) -> threading.Thread:
    """A client adding for extraction (async_mode): each acknowledged event id is recorded."""

    def adder() -> None:
        with pair.stack.client() as client:
            n = 0
            while not stop.is_set():
                n += 1
                body = {
                    "messages": f"I collect stamp number {n} from {uuid.uuid4().hex[:6]}",
                    "user_id": f"{pair.stack.user}-x",
                    "async_mode": True,
                }
                try:
                    reply = client.post("/v1/memories/", json=body)
                except httpx.HTTPError as error:
                    pair.event_errors.append(f"{type(error).__name__}: {error}")
                    continue
                if reply.status_code == 200:
                    for item in reply.json():
                        pair.events[item["event_id"]] = time.monotonic()
                elif reply.status_code != 503 or not reply.json().get("detail"):
                    pair.event_errors.append(f"{reply.status_code} {reply.text[:200]}")
                time.sleep(0.05)

    thread = threading.Thread(target=adder)
    thread.start()
    return thread


def rehearse(pair: Pair) -> tuple[Outcomes, float]:
    """Load, the primary stopped hard, a few seconds without a primary, the standby promoted,
    load again; returns what the clients saw and when the promotion finished."""
    outcomes, stop = Outcomes(), threading.Event()
    threads = [*run_clients(pair.stack, outcomes, stop), queue_adds(pair, stop)]
    try:
        assert wait_for_success(outcomes, after=time.monotonic() - 60)
        time.sleep(2)
        rows = pair.primary.sql(
            "SELECT write_lag::text, flush_lag::text, replay_lag::text FROM pg_stat_replication"
        )
        pair.lag = "write {}, flush {}, replay {}".format(*rows[0]) if rows else "unknown"
        pair.primary.stop("immediate")
        time.sleep(3)  # no primary: every request must still answer, at once
        pair.standby.promote()
        promoted = time.monotonic()
        assert wait_for_success(outcomes, after=promoted, timeout=45), outcomes.unexpected
        time.sleep(3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=CLIENT_TIMEOUT + 5)
    return outcomes, promoted


def assert_refusals(outcomes: Outcomes) -> None:
    """Every answer that was not a success is a 503 the client may retry: the database is
    unavailable, or (a request whose connection attempts used its budget) its deadline came."""
    assert outcomes.unexpected == []
    for response in outcomes.unavailable:
        assert response.headers["content-type"] == "application/json"
        detail = response.json()["detail"]
        assert detail in (UNAVAILABLE_DETAIL, DEADLINE_DETAIL), detail
        assert response.headers["Retry-After"] in ("5", "2")


def stored(pair: Pair, ids: list[str]) -> dict[str, str]:
    """{id: text} of these memories on the new primary."""
    rows = pair.standby.sql(
        "SELECT id::text, text FROM memory_memory WHERE id::text = ANY(%s)", [ids]
    )
    return dict(rows)


def finished(pair: Pair) -> dict[str, str]:
    """Each acknowledged event's status on the new primary (missing: not there)."""
    rows = pair.standby.sql(
        "SELECT id::text, status FROM memory_memoryevent WHERE id::text = ANY(%s)",
        [list(pair.events)],
    )
    return dict(rows)


def report(pair: Pair) -> str:
    """What the acknowledged events came to, and the end of the worker's and sweeper's logs."""
    found = finished(pair)
    statuses = Counter(found.values())
    logs = {
        name: (pair.primary.home / f"{name}.log").read_text()[-3000:]
        for name in ("worker", "sweeper")
    }
    return f"{len(pair.events) - len(found)} missing, {dict(statuses)}; logs: {logs}"


def test_failover_with_synchronous_replication_loses_nothing() -> None:
    with primary_and_standby(synchronous=True) as pair:
        outcomes, promoted = rehearse(pair)
        assert_refusals(outcomes)
        assert pair.event_errors == []
        assert len(outcomes.unavailable) > 0  # the switch was seen, and answered
        assert len(outcomes.acked) > 10 and len(pair.events) > 5
        assert (
            stored(pair, list(outcomes.acked)) == outcomes.acked
        )  # every acknowledged raw add, with its text

        def all_done() -> bool:
            found = finished(pair)
            return len(found) == len(pair.events) and set(found.values()) == {"SUCCEEDED"}

        deadline = time.monotonic() + 90
        while not all_done():
            assert time.monotonic() < deadline, report(pair)
            time.sleep(1)
        first = min(t for t in outcomes.ok if t > promoted)
        print(
            f"\nsynchronous failover: {len(outcomes.acked)} raw adds and {len(pair.events)} add "
            f"requests acknowledged, none missing; {len(outcomes.unavailable)} answers 503; the "
            f"first success {first - promoted:.2f} s after the promotion; every add request "
            f"processed {time.monotonic() - promoted:.0f} s after it"
        )


def test_failover_with_asynchronous_replication_measures_what_is_lost() -> None:
    with primary_and_standby(synchronous=False) as pair:
        outcomes, _ = rehearse(pair)
        assert_refusals(outcomes)
        assert pair.event_errors == []
        kept = stored(pair, list(outcomes.acked))
        lost = sorted(set(outcomes.acked) - set(kept))
        found = finished(pair)
        lost_events = [e for e in pair.events if e not in found]
        print(
            f"\nasynchronous failover: {len(lost)} of {len(outcomes.acked)} acknowledged raw "
            f"adds and {len(lost_events)} of {len(pair.events)} acknowledged add requests "
            f"missing on the promoted standby (its lag just before: {pair.lag})"
        )
        assert kept == {k: outcomes.acked[k] for k in kept}  # what is there is whole
        # What the standby has, it finishes: no event that reached it stays stuck.
        deadline = time.monotonic() + 90
        while set(finished(pair).values()) - {"SUCCEEDED"}:
            assert time.monotonic() < deadline, report(pair)
            time.sleep(1)
