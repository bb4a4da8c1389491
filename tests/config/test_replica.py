"""Search on a streaming read replica (tenants.replica), against a real standby.

The module makes a physical standby of the local test cluster (pg_basebackup -R through a
replication slot, over the cluster's unix socket as the postgres superuser, which its pg_hba
trusts for replication) in a temp directory on a free loopback port, points the "replica" alias
at its copy of the test database, and stops and removes it (and the slot) at the end. Which
connection ran search's statement is read from each connection's captured queries.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from memory.models import Memory
from memory.retrieval.search import OUTER_FROM, hybrid_search
from memory.text.embeddings import embed_one
from memory.text.query import analyse
from tenants import replica as routing
from tenants.actions import NewApiKey
from tenants.db import project_context
from tests.factory import auth, make_key, make_memory

# Committed rows (the standby sees only what commits); the replica alias is one of the test's
# databases, a mirror: never flushed.
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "replica"])

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path("/usr/lib/postgresql/17/bin")
SEARCH_STATEMENT = OUTER_FROM  # hybrid_search's outer statement
# A fresh cluster (CI) copies in seconds; a workstation's full of benchmark databases would
# take minutes: then the tests skip, unless ENGRAM_TEST_REPLICA_MAX_GIB allows more.
MAX_CLUSTER_BYTES = float(os.environ.get("ENGRAM_TEST_REPLICA_MAX_GIB", "8")) * 2**30
# The standby streams through a physical slot of this name plus the pytest process id, so the
# primary keeps the WAL it has not received yet even under a heavy write load (without one, a
# busy primary recycles it and the standby stops for good); dropped at the end, and a crashed
# run's slot (its process gone) at the next start.
SLOT_PREFIX = "engram_test_replica_"
# The shared cluster may be busy (another run's benchmark load): the standby's replay can
# trail by seconds.
CATCH_UP_SECONDS = 60


@dataclass
class Standby:
    data: Path
    socket_dir: Path
    port: int

    def superuser(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=str(self.socket_dir), port=self.port, user="postgres", dbname="postgres",
            autocommit=True,
        )  # fmt: skip

    def pg_ctl(self, *args: str) -> None:
        as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args)

    def start(self) -> None:
        self.pg_ctl("-l", str(self.socket_dir / "postgres.log"), "start")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


def primary_superuser() -> psycopg.Connection[Any]:
    port = connections["default"].settings_dict["PORT"] or 5432
    return psycopg.connect(
        host=str(primary_socket()), port=port, user="postgres", dbname="postgres", autocommit=True
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def drop_slots(primary: psycopg.Connection[Any], *, only: str | None = None) -> None:
    """Drop this run's slot (`only`), or the slots of test runs whose process is gone."""
    for _ in range(50):
        rows = primary.execute(
            "SELECT slot_name, active_pid FROM pg_replication_slots WHERE slot_name LIKE %s",
            [SLOT_PREFIX + "%"],
        ).fetchall()
        stale = [
            (name, pid) for name, pid in rows
            if name == only or (only is None and not alive(int(name.removeprefix(SLOT_PREFIX))))
        ]  # fmt: skip
        if not stale:
            return
        for name, pid in stale:
            if pid is not None:  # the walsender of a standby that is gone; it may linger
                primary.execute("SELECT pg_terminate_backend(%s)", [pid])
            else:
                primary.execute("SELECT pg_drop_replication_slot(%s)", [name])
        time.sleep(0.1)


def as_postgres(*command: str) -> None:
    # PostgreSQL refuses to run as root (scripts/pg.sh does the same).
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    run = [*prefix, *command]
    subprocess.run(run, check=True, capture_output=True, cwd=tempfile.gettempdir(), timeout=120)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def primary_socket() -> Path:
    """The local cluster's socket directory, named as scripts/pg.sh names it."""
    pgdir = (ROOT / ".local" / "pgdir").read_text().strip()
    digest = hashlib.sha256(pgdir.encode()).hexdigest()[:12]
    return Path(f"/tmp/engram-pg-{digest}")  # noqa: S108 - a fixed name, not a temp file


@pytest.fixture(scope="module")
def standby(django_db_setup: None, django_db_blocker: Any) -> Iterator[Standby]:
    if not (ROOT / ".local" / "pgdir").exists() or not (PG_BIN / "pg_basebackup").exists():
        pytest.skip("needs the local cluster of scripts/pg.sh")
    with django_db_blocker.unblock(), connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('wal_level'), current_setting('max_wal_senders'), "
            "(SELECT sum(pg_database_size(oid)) FROM pg_database)"
        )
        wal_level, senders, size = cursor.fetchone()
    if wal_level == "minimal" or int(senders) == 0:
        pytest.skip(f"the cluster cannot stream (wal_level={wal_level}, max_wal_senders={senders})")
    if size > MAX_CLUSTER_BYTES:  # pg_basebackup copies every database of the cluster
        pytest.skip(f"the cluster holds {size / 2**30:.1f} GiB (ENGRAM_TEST_REPLICA_MAX_GIB)")
    home = Path(tempfile.mkdtemp(prefix="engram-replica-"))
    shutil.chown(home, "postgres")
    server = Standby(home / "data", home, free_port())
    slot = f"{SLOT_PREFIX}{os.getpid()}"
    admin = primary_superuser()
    try:
        drop_slots(admin)
        port = str(connections["default"].settings_dict["PORT"] or 5432)
        as_postgres(
            str(PG_BIN / "pg_basebackup"), "-h", str(primary_socket()), "-p", port,
            "-U", "postgres", "-D", str(server.data), "-R", "-X", "stream", "-c", "fast",
            "--no-manifest", "--create-slot", "--slot", slot,
        )  # fmt: skip
        # Settings appended here win over the copied engram.conf (the primary's port, socket).
        settings = (
            f"port = {server.port}\nunix_socket_directories = '{home}'\n"
            "listen_addresses = '127.0.0.1'\nshared_buffers = '128MB'\n"
        )
        auto_conf = server.data / "postgresql.auto.conf"
        auto_conf.write_text(auto_conf.read_text() + settings)
        server.start()
        # The "replica" alias, as settings makes it from ENGRAM_REPLICA_URL, on the standby's
        # copy of this test database; it exists before the tests' database set-up (pytestmark).
        primary = connections["default"].settings_dict
        connections.settings[routing.REPLICA] = {
            **primary, "HOST": "127.0.0.1", "PORT": server.port,
            "OPTIONS": {**primary["OPTIONS"], "connect_timeout": 2}, "TEST": {"MIRROR": "default"},
        }  # fmt: skip
        yield server
    finally:
        if routing.REPLICA in connections.settings:
            with django_db_blocker.unblock():
                connections[routing.REPLICA].close()
            del connections[routing.REPLICA]
            del connections.settings[routing.REPLICA]
        if server.running():
            server.pg_ctl("-m", "immediate", "stop")
        with admin:
            drop_slots(admin, only=slot)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def replica(standby: Standby, committed_db: None) -> Iterator[Standby]:
    if not standby.running():  # a test stopped it
        standby.start()
    routing._down_until = 0.0
    yield standby
    routing._down_until = 0.0


def lsn(alias: str, function: str) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT {function}() - '0/0'::pg_lsn")
        return int(cursor.fetchone()[0])


def wait_until(predicate: Callable[[], bool], seconds: float = CATCH_UP_SECONDS) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def caught_up() -> bool:
    return lsn(routing.REPLICA, "pg_last_wal_replay_lsn") >= lsn(
        "default", "pg_current_wal_flush_lsn"
    )


@dataclass
class Served:
    status: int
    texts: list[str]
    on_replica: bool
    on_primary: bool


def search(client: Any, key: NewApiKey, query: str, *, standby_up: bool = True) -> Served:
    body = {"query": query, "user_id": "alice"}
    with ExitStack() as stack:
        primary = stack.enter_context(CaptureQueriesContext(connections["default"]))
        # Capturing connects first: not to a standby that is down.
        standby = stack.enter_context(
            CaptureQueriesContext(
                connections[routing.REPLICA] if standby_up else connections["default"]
            )
        )
        response = client.post(
            "/v3/memories/search/", body, content_type="application/json", headers=auth(key.raw)
        )
    texts = (
        [hit["memory"] for hit in response.json()["results"]] if response.status_code == 200 else []
    )

    def ran(queries: CaptureQueriesContext) -> bool:
        return any(SEARCH_STATEMENT in q["sql"] for q in queries.captured_queries)

    return Served(response.status_code, texts, standby_up and ran(standby), ran(primary))


def search_on_replica(client: Any, key: NewApiKey, query: str) -> Served:
    """The first of a few searches the replica served: the shared cluster's other sessions
    keep committing, so the standby can be a moment behind any one search's watermark."""
    served = search(client, key, query)
    for _ in range(50):
        if served.on_replica:
            break
        wait_until(caught_up)
        served = search(client, key, query)
    return served


def add(client: Any, key: NewApiKey, text: str) -> Any:
    body = {"messages": [{"role": "user", "content": text}], "user_id": "alice", "infer": False}
    return client.post(
        "/v1/memories/", body, content_type="application/json", headers=auth(key.raw)
    )


def test_it_serves_a_caught_up_search_from_the_replica(replica: Standby, client: Any) -> None:
    key = make_key("acme", "replica-read")
    assert add(client, key, "I keep bees on the roof").status_code == 200
    assert wait_until(caught_up)
    served = search_on_replica(client, key, "beekeeping on the roof")
    assert (served.on_replica, served.on_primary) == (True, False)
    assert served.texts == ["I keep bees on the roof"]
    with connections[routing.REPLICA].cursor() as cursor:
        cursor.execute("SELECT pg_is_in_recovery()")
        assert cursor.fetchone() == (True,)


def test_it_applies_the_callers_tenant_on_the_replica(replica: Standby, client: Any) -> None:
    alice, charlie = make_key("acme", "replica-rls"), make_key("globex", "replica-rls")
    add(client, alice, "I keep bees on the roof")
    assert wait_until(caught_up)
    served = search_on_replica(client, charlie, "bees on the roof")
    assert (served.on_replica, served.texts) == (True, [])
    # Row-level security holds on the standby: outside a tenant transaction nothing shows.
    with connections[routing.REPLICA].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM memory_memory")
        assert cursor.fetchone() == (0,)


def test_it_writes_to_the_primary_only(replica: Standby, client: Any) -> None:
    key = make_key("acme", "replica-write")
    with CaptureQueriesContext(connections[routing.REPLICA]) as standby:
        assert add(client, key, "My sister lives in Oslo").status_code == 200
    assert standby.captured_queries == []
    with project_context(key.key.project_id):
        assert list(Memory.objects.values_list("text", flat=True)) == ["My sister lives in Oslo"]


def test_it_searches_the_primary_while_replay_is_paused(replica: Standby, client: Any) -> None:
    key = make_key("acme", "replica-lag")
    with replica.superuser() as admin:
        admin.execute("SELECT pg_wal_replay_pause()")
        try:
            assert wait_until(
                lambda: (
                    admin.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
                    == ("paused",)
                )
            )
            assert add(client, key, "My flight to Lisbon leaves at nine").status_code == 200
            served = search(client, key, "flight to Lisbon")
            assert (served.on_replica, served.on_primary) == (False, True)
            assert served.texts == ["My flight to Lisbon leaves at nine"]
        finally:
            admin.execute("SELECT pg_wal_replay_resume()")
    assert wait_until(caught_up)
    served = search_on_replica(client, key, "flight to Lisbon")
    assert (served.on_replica, served.texts) == (True, ["My flight to Lisbon leaves at nine"])


def test_it_keeps_a_writing_transactions_search_on_the_primary(replica: Standby) -> None:
    key = make_key("acme", "replica-own-write")
    project = key.key.project_id
    with project_context(project), CaptureQueriesContext(connections[routing.REPLICA]) as standby:
        make_memory(project, "User likes green tea", embedding=embed_one("green tea"))
        found = hybrid_search(
            Memory.objects.filter(project_id=project), analyse("green tea"), top_k=5, threshold=0.1
        )
    assert [hit.memory.text for hit in found] == ["User likes green tea"]
    assert not any(SEARCH_STATEMENT in q["sql"] for q in standby.captured_queries)


def test_it_answers_from_the_primary_when_the_replica_is_down(
    replica: Standby, client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    key = make_key("acme", "replica-down")
    add(client, key, "I play the cello on Sundays")
    replica.pg_ctl("-m", "immediate", "stop")
    first, second = (search(client, key, "cello", standby_up=False) for _ in range(2))
    assert (first.status, first.on_primary) == (200, True)
    assert first.texts == ["I play the cello on Sundays"]
    assert (second.status, second.on_primary) == (200, True)
    assert "read replica unreachable" in caplog.text
    assert routing._down_until > time.monotonic()  # the second search did not try it
