"""Database faults against the real server: gunicorn (config/gunicorn_conf.py) on a private
PostgreSQL cluster (tests/faults/db_cluster.py) that is restarted, crashed, starved of
connections and filled up while clients add and search.

What must hold: a request during the fault gets a 503 with the JSON `detail` (and
Retry-After), never a 500 and never a hang (each request has a client timeout); the server
recovers by itself once the database is back; every add answered with success is in the
database afterwards, with its text. The SQLSTATE mapping itself is unit-tested first.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest
from django.db import InterfaceError, OperationalError
from django.db.utils import DataError

from config.exceptions import (
    UNAVAILABLE_DETAIL,
    api_exception_handler,
    database_unavailable,
    json_server_error,
)
from memory.extraction.broker import SEND_BUDGET_SECONDS
from tests.faults.db_cluster import APP, PG_BIN, PrivateCluster, Server, private_stack

# A request that takes longer than this counts as a hang (connect_timeout is 5 s).
CLIENT_TIMEOUT = 15.0


# --- The mapping of database errors to 503 ---------------------------------------------------


def _django_error(kind: type[Exception], sqlstate: str | None) -> Exception:
    """A Django database error as its wrapper raises it: the driver's error as __cause__."""
    cause: Exception = (
        psycopg.errors.lookup(sqlstate)("secret value 'alice@example.com'")
        if sqlstate
        else psycopg.OperationalError("connection failed: connection refused")
    )
    error = kind(*cause.args)
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    "sqlstate",
    [None, "53100", "53300", "57P01", "57P02", "57P03", "08006", "08001", "08003"],
)
def test_unavailable_database_errors_answer_503_with_detail(sqlstate: str | None) -> None:
    error = _django_error(OperationalError, sqlstate)
    assert database_unavailable(error)
    response = api_exception_handler(error, {})
    assert response is not None
    assert response.status_code == 503
    assert response.data == {"detail": UNAVAILABLE_DETAIL}
    assert response["Retry-After"] == "5"


def test_lost_connection_interface_error_is_unavailable() -> None:
    assert database_unavailable(InterfaceError("connection already closed"))


@pytest.mark.parametrize("sqlstate", ["42601", "57014", "22001"])
def test_other_database_errors_are_not_unavailable(sqlstate: str) -> None:
    """A syntax error, a statement timeout, a bad value: bugs or input, not an outage."""
    kind = DataError if sqlstate.startswith("22") else OperationalError
    assert not database_unavailable(_django_error(kind, sqlstate))
    assert not database_unavailable(ValueError("no"))


@pytest.mark.parametrize(
    ("sqlstate", "status", "retry_after"),
    [("53100", 503, "5"), ("57P01", 503, "5"), ("57014", 503, "2"), ("42601", 500, None)],
)
def test_server_error_handler_maps_an_outage_outside_drf(
    sqlstate: str, status: int, retry_after: str | None
) -> None:
    """Failures outside a DRF view (a middleware) reach handler500 inside Django's except: an
    outage or a statement past its deadline (57014) is a 503 to retry, a bug a 500."""
    try:
        raise _django_error(OperationalError, sqlstate)
    except OperationalError:
        response = json_server_error(None)  # type: ignore[arg-type]
    assert response.status_code == status
    assert b"secret" not in response.content  # the driver's message never reaches the client
    assert response.get("Retry-After") == retry_after


def test_server_error_handler_without_exception_is_500() -> None:
    assert json_server_error(None).status_code == 500  # type: ignore[arg-type]


# --- Against gunicorn and a private cluster ----------------------------------------------------

needs_root_tools = pytest.mark.skipif(
    os.geteuid() != 0
    or not (PG_BIN / "initdb").exists()
    or not all(shutil.which(tool) for tool in ("unshare", "nsenter", "runuser")),
    reason="needs root (a private mount namespace), PostgreSQL 17's binaries, unshare, nsenter "
    "and runuser",
)


@dataclass
class Stack:
    cluster: PrivateCluster
    server: Server
    key: str
    user: str = field(default_factory=lambda: f"faults-{uuid.uuid4().hex[:8]}")

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url,
            headers={"Authorization": f"Token {self.key}"},
            timeout=CLIENT_TIMEOUT,
        )

    def stored(self, ids: list[str]) -> dict[str, str]:
        """{id: text} of these memories as the database holds them (as the superuser)."""
        rows = self.cluster.sql("SELECT id::text, text FROM memory_memory WHERE id::text = ANY(%s)",
                                [ids])  # fmt: skip
        return {row[0]: row[1] for row in rows}


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with private_stack() as (cluster, server, key):
        yield Stack(cluster, server, key)


@dataclass
class Outcomes:
    """What the clients saw: acknowledged adds, and every answer that was not a success."""

    acked: dict[str, str] = field(default_factory=dict)  # memory id -> text
    ok: list[float] = field(default_factory=list)  # when each success came (monotonic)
    unavailable: list[httpx.Response] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, response: httpx.Response) -> None:
        with self.lock:
            if response.status_code == 200:
                self.ok.append(time.monotonic())
                if "/search/" not in str(response.request.url):
                    for result in response.json()["results"]:
                        self.acked[result["id"]] = result["memory"]
            elif response.status_code == 503:
                self.unavailable.append(response)
            else:
                self.unexpected.append(f"{response.status_code} {response.text[:300]}")

    def failed(self, error: Exception) -> None:
        with self.lock:
            self.unexpected.append(f"{type(error).__name__}: {error}")


def add_body(user: str, texts: list[str]) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": text} for text in texts],
        "user_id": user,
        "infer": False,
    }


def add_in_background(
    stack: Stack, text: str, replies: list[httpx.Response | Exception]
) -> threading.Thread:
    """One add of `text` in a thread; its answer (or the client's error) goes to `replies`."""

    def add() -> None:
        with stack.client() as client:
            try:
                replies.append(client.post("/v1/memories/", json=add_body(stack.user, [text])))
            except httpx.HTTPError as error:
                replies.append(error)

    thread = threading.Thread(target=add)
    thread.start()
    return thread


def lock_waiters(stack: Stack, seconds: float) -> list[tuple[Any, ...]]:
    """The application's backends waiting on a lock, as soon as there is one (within `seconds`)."""
    waiting: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + seconds
    while not waiting and time.monotonic() < deadline:
        time.sleep(0.05)
        waiting = stack.cluster.sql(
            "SELECT pid FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'",
            [APP],
        )
    return waiting


def run_clients(stack: Stack, outcomes: Outcomes, stop: threading.Event) -> list[threading.Thread]:
    """Two clients adding (one memory per request) and one searching, until `stop`."""

    def adder(name: str) -> None:
        with stack.client() as client:
            n = 0
            while not stop.is_set():
                n += 1
                text = f"Fault note {name}-{n}: the user keeps bees in {uuid.uuid4().hex[:6]}"
                try:
                    outcomes.record(client.post("/v1/memories/", json=add_body(stack.user, [text])))
                except httpx.HTTPError as error:
                    outcomes.failed(error)
                time.sleep(0.02)

    def searcher() -> None:
        with stack.client() as client:
            while not stop.is_set():
                body = {"query": "who keeps bees?", "user_id": stack.user, "top_k": 5}
                try:
                    outcomes.record(client.post("/v1/memories/search/", json=body))
                except httpx.HTTPError as error:
                    outcomes.failed(error)
                time.sleep(0.02)

    threads = [threading.Thread(target=adder, args=(name,)) for name in ("a", "b")]
    threads.append(threading.Thread(target=searcher))
    for thread in threads:
        thread.start()
    return threads


def wait_for_success(outcomes: Outcomes, after: float, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with outcomes.lock:
            if sum(1 for t in outcomes.ok if t > after) >= 3:
                return True
        time.sleep(0.1)
    return False


def assert_unavailable_replies(outcomes: Outcomes) -> None:
    assert outcomes.unexpected == []
    for response in outcomes.unavailable:
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {"detail": UNAVAILABLE_DETAIL}
        assert response.headers["Retry-After"] == "5"


@needs_root_tools
@pytest.mark.faults
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restart_while_clients_add_and_search(stack: Stack, mode: str) -> None:
    """`pg_ctl stop -m fast` (clean shutdown) or `-m immediate` (a crash: recovery replays
    the WAL), down for longer than an add's queue send may wait after its commit, then started
    again, with clients running throughout.

    The outage outlasts SEND_BUDGET_SECONDS: an add that committed just before the stop may
    hold its web worker that long while its entity-linking send gives up (it still answers
    200), and with both workers so held the other clients' requests wait in the queue; only
    after that must the requests made while the database is down be refused."""
    outcomes, stop = Outcomes(), threading.Event()
    threads = run_clients(stack, outcomes, stop)
    try:
        assert wait_for_success(outcomes, after=0), "no success before the fault"
        stack.cluster.stop(mode)
        down = time.monotonic()
        time.sleep(SEND_BUDGET_SECONDS + 2)
        stack.cluster.start()
        back = time.monotonic()
        recovered = wait_for_success(outcomes, after=back)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=CLIENT_TIMEOUT + 5)
    assert recovered, "the server did not recover after PostgreSQL came back"
    assert_unavailable_replies(outcomes)
    # The outage was seen: requests made while the database was down were refused.
    assert outcomes.unavailable, f"no 503 while PostgreSQL was down ({back - down:.1f} s)"
    # Every add answered with success is there, with its text, after the restart (or crash).
    assert outcomes.acked
    assert stack.stored(list(outcomes.acked)) == outcomes.acked


@needs_root_tools
@pytest.mark.faults
def test_connection_lost_mid_query_answers_503_and_keeps_nothing(stack: Stack) -> None:
    """An add waits inside its transaction (the superuser holds a lock on the memory table)
    when its server process is terminated, as a fast shutdown does: 503, nothing stored."""
    text = f"Interrupted note {uuid.uuid4().hex}"
    replies: list[httpx.Response | Exception] = []
    with stack.cluster.connect() as holder:
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE memory_memory IN ACCESS EXCLUSIVE MODE")
        thread = add_in_background(stack, text, replies)
        waiting = lock_waiters(stack, CLIENT_TIMEOUT)
        assert waiting, "the add never waited on the lock"
        stack.cluster.sql("SELECT pg_terminate_backend(%s)", [waiting[0][0]])
        thread.join(timeout=CLIENT_TIMEOUT + 5)
        holder.execute("ROLLBACK")
    [reply] = replies
    assert isinstance(reply, httpx.Response), reply
    assert reply.status_code == 503
    assert reply.json() == {"detail": UNAVAILABLE_DETAIL}
    assert stack.cluster.sql("SELECT 1 FROM memory_memory WHERE text = %s", [text]) == []
    # The server recovers at once: the next request gets a fresh connection.
    with stack.client() as client:
        assert client.post("/v1/memories/", json=add_body(stack.user, [text])).status_code == 200


@needs_root_tools
@pytest.mark.faults
def test_out_of_connections_answers_503_then_recovers(stack: Stack) -> None:
    """The application role may open no connection (its limit is 0, the open ones are ended),
    as when max_connections is reached: a clear 503, and recovery when connections return."""
    stack.cluster.sql(f"ALTER ROLE {APP} CONNECTION LIMIT 0")
    try:
        stack.cluster.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [APP]
        )
        outcomes = Outcomes()
        with stack.client() as client:
            for n in range(4):
                text = f"Starved note {n} {uuid.uuid4().hex[:6]}"
                outcomes.record(client.post("/v1/memories/", json=add_body(stack.user, [text])))
                outcomes.record(
                    client.post("/v1/memories/search/", json={"query": "x", "user_id": stack.user})
                )
        assert_unavailable_replies(outcomes)
        assert len(outcomes.unavailable) == 8
        assert outcomes.acked == {}
    finally:
        stack.cluster.sql(f"ALTER ROLE {APP} CONNECTION LIMIT -1")
    outcomes = Outcomes()
    with stack.client() as client:
        for n in range(3):
            text = f"Fed note {n} {uuid.uuid4().hex[:6]}"
            outcomes.record(client.post("/v1/memories/", json=add_body(stack.user, [text])))
    assert outcomes.unexpected == []
    assert outcomes.unavailable == []
    assert len(outcomes.acked) == 3
    assert stack.stored(list(outcomes.acked)) == outcomes.acked


@needs_root_tools
@pytest.mark.faults
def test_disk_full_answers_503_without_corruption_then_recovers(stack: Stack) -> None:
    """The database's volume (a tmpfs in the cluster's own mount namespace) is shrunk to what
    it holds plus a little, and clients add until the server runs out of space."""
    cluster = stack.cluster
    cluster.resize_volume(cluster.volume_used() + 2 * 1024 * 1024)
    outcomes = Outcomes()
    try:
        with stack.client() as client:
            for n in range(400):
                texts = [f"Disk note {n}-{i}: {uuid.uuid4().hex * 20}" for i in range(10)]
                outcomes.record(client.post("/v1/memories/", json=add_body(stack.user, texts)))
                if len(outcomes.unavailable) >= 3 or outcomes.unexpected:
                    break
            full_search = client.post(
                "/v1/memories/search/", json={"query": "disk", "user_id": stack.user}
            )
    finally:
        cluster.resize_volume(512 * 1024 * 1024)
    assert_unavailable_replies(outcomes)
    assert len(outcomes.unavailable) >= 3, "the volume never filled up"
    # A search needs no new space unless its access-log row does: either answer is clean.
    assert full_search.status_code in (200, 503)
    # Space is back: adds work again, and nothing acknowledged was lost.
    with stack.client() as client:
        after = client.post("/v1/memories/", json=add_body(stack.user, ["After the disk filled"]))
    outcomes.record(after)
    assert after.status_code == 200
    assert stack.stored(list(outcomes.acked)) == outcomes.acked
    # No corruption: amcheck finds the memory table and every B-tree index on it consistent.
    cluster.sql("CREATE EXTENSION IF NOT EXISTS amcheck")
    assert cluster.sql("SELECT * FROM verify_heapam('memory_memory')") == []
    indexes = cluster.sql(
        "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_class c "
        "ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
        "WHERE i.indrelid = 'memory_memory'::regclass AND a.amname = 'btree'"
    )
    assert indexes
    for (index,) in indexes:
        cluster.sql("SELECT bt_index_check(%s::regclass, true)", [index])


@needs_root_tools
@pytest.mark.faults
def test_queue_unreachable_after_commit_still_answers(stack: Stack) -> None:
    """The add's transaction commits; then the database becomes unreachable for the queue
    write that follows it (its table is locked, its connection ended, new ones refused). The
    memory is stored, so the client gets its 200 (or at worst a 503) within the send's budget
    (memory.extraction.broker.SEND_BUDGET_SECONDS), not after gunicorn's 30 s timeout."""
    text = f"Committed before the outage {uuid.uuid4().hex}"
    replies: list[httpx.Response | Exception] = []
    holder = stack.cluster.connect()
    try:
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE dramatiq.queue IN ACCESS EXCLUSIVE MODE")
        thread = add_in_background(stack, text, replies)
        assert lock_waiters(stack, 5), "the queue write never waited"
        assert stack.cluster.sql("SELECT 1 FROM memory_memory WHERE text = %s", [text])
        stack.cluster.sql(f"ALTER ROLE {APP} CONNECTION LIMIT 0")
        # Every connection of the app ends (the queue's pool holds idle ones too).
        stack.cluster.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [APP]
        )
        holder.execute("ROLLBACK")
        thread.join(timeout=15)
    finally:
        holder.close()
        stack.cluster.sql(f"ALTER ROLE {APP} CONNECTION LIMIT -1")
    [reply] = replies
    assert isinstance(reply, httpx.Response), f"no answer: {reply!r}"
    assert reply.status_code == 200, reply.text  # stored: its answer, the lost send logged
    assert reply.json()["results"][0]["memory"] == text
