"""engram behind a real PgBouncer in transaction mode (issue #51, part 4).

A real gunicorn and a real `dramatiq config.worker` reach the test database only through a
PgBouncer started by scripts/pgbouncer.sh (pool_mode = transaction), with
ENGRAM_DB_POOL_MODE=transaction; the worker listens for jobs over a direct URL
(ENGRAM_BROKER_LISTEN_URL). Through it: the API's memory lifecycle, an add extracted by the
worker, tenant isolation, a statement deadline that fires (503), the background deadlines of
another kind of process, no setting left on a pooled server session, and prepared statements
that move between server sessions.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import dj_database_url
import httpx
import psycopg
import pytest
from django.conf import settings
from django.db import connections

from tests.config.test_deadlines import memories_locked
from tests.config.test_gunicorn import free_port, gunicorn_server
from tests.factory import make_key
from tests.memory.test_events import start_worker, stop, wait_for

pytestmark = pytest.mark.pgbouncer

ROOT = settings.BASE_DIR
SCRIPT = ROOT / "scripts" / "pgbouncer.sh"
POOLED = {"ENGRAM_DB_POOL_MODE": "transaction"}
# The API's statement deadline, short enough to wait for; no lock deadline, so a statement
# made to wait for a lock is ended by the statement deadline (57014).
API_DEADLINES = {"ENGRAM_API_STATEMENT_TIMEOUT_MS": "1500", "ENGRAM_API_LOCK_TIMEOUT_MS": "0"}


def _script(command: str, port: int) -> str:
    db = connections["default"].settings_dict
    env = {**os.environ, "ENGRAM_PG_PORT": str(db["PORT"]), "ENGRAM_PGBOUNCER_PORT": str(port)}
    done = subprocess.run(
        [str(SCRIPT), command], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _app_url(port: int) -> str:
    """The test database as the application role (DATABASE_URL's), on 127.0.0.1:`port`: a
    module's fixture may run while a committed test's teardown left the owner connected."""
    app = dj_database_url.parse(os.environ["DATABASE_URL"])
    name = connections["default"].settings_dict["NAME"]
    return f"postgresql://{app['USER']}:{app['PASSWORD']}@127.0.0.1:{port}/{name}"


@pytest.fixture(scope="module")
def pooled_url(django_db_setup: None) -> Iterator[str]:
    """The test database's URL through a PgBouncer of its own, in transaction mode."""
    port = free_port()
    _script("start", port)
    try:
        yield _app_url(port)
    finally:
        _script("stop", port)


@pytest.fixture(scope="module")
def api(pooled_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A real gunicorn and a real worker, both on the database only through PgBouncer."""
    log = tmp_path_factory.mktemp("pgbouncer") / "gunicorn.log"
    with ExitStack() as stack:
        port = stack.enter_context(
            gunicorn_server(log, DATABASE_URL=pooled_url, **POOLED, **API_DEADLINES)
        )
        direct = _app_url(int(connections["default"].settings_dict["PORT"]))
        worker = start_worker(DATABASE_URL=pooled_url, ENGRAM_BROKER_LISTEN_URL=direct, **POOLED)
        stack.callback(stop, worker)
        client = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30))
        yield client


def _headers(raw_key: str) -> dict[str, str]:
    return {"Authorization": f"Token {raw_key}"}


def _search(api: httpx.Client, raw_key: str, query: str, user_id: str = "alice") -> Any:
    body = {"query": query, "filters": {"user_id": user_id}}
    return api.post("/v2/memories/search/", json=body, headers=_headers(raw_key))


def test_the_memory_lifecycle_runs_through_the_pooler(
    committed_db: None, api: httpx.Client
) -> None:
    key = make_key("acme", "pooled").raw
    body = {"messages": "I keep bees in Lisbon.", "user_id": "alice", "infer": False}
    added = api.post("/v1/memories/", json=body, headers=_headers(key))
    assert added.status_code == 200, added.text
    memory_id = added.json()["results"][0]["id"]

    found = _search(api, key, "bees")
    assert [m["id"] for m in found.json()] == [memory_id], found.text
    changed = api.put(f"/v1/memories/{memory_id}/", json={"text": "I keep bees in Porto."},
                      headers=_headers(key))  # fmt: skip
    assert changed.status_code == 200, changed.text
    got = api.get(f"/v1/memories/{memory_id}/", headers=_headers(key))
    assert got.json()["memory"] == "I keep bees in Porto.", got.text
    history = api.get(f"/v1/memories/{memory_id}/history/", headers=_headers(key)).json()
    assert [h["event"] for h in history] == ["ADD", "UPDATE"], history
    assert api.delete(f"/v1/memories/{memory_id}/", headers=_headers(key)).status_code == 200
    assert api.get(f"/v1/memories/{memory_id}/", headers=_headers(key)).status_code == 404


def test_an_add_is_extracted_by_the_worker_through_the_pooler(
    committed_db: None, api: httpx.Client
) -> None:
    key = make_key("acme", "pooled").raw
    body = {"messages": "Hi! I love hiking in the Alps.", "user_id": "alice"}
    added = api.post("/v3/memories/add/", json=body, headers=_headers(key))
    event_id = added.json()["event_id"]

    def done() -> bool:
        event = api.get(f"/v1/event/{event_id}/", headers=_headers(key)).json()
        return event["status"] not in ("PENDING", "RUNNING")

    assert wait_for(done, seconds=45)
    event = api.get(f"/v1/event/{event_id}/", headers=_headers(key)).json()
    assert (event["status"], event["extractor"]) == ("SUCCEEDED", "offline"), event
    listed = api.get("/v1/memories/", params={"user_id": "alice"}, headers=_headers(key)).json()
    assert [m["memory"] for m in listed] == ["I love hiking in the Alps."], listed


def test_another_projects_key_sees_nothing_through_the_pooler(
    committed_db: None, api: httpx.Client
) -> None:
    alice, charlie = make_key("acme", "pooled").raw, make_key("globex", "other").raw
    body = {"messages": "My PIN is 4242.", "user_id": "alice", "infer": False}
    memory_id = api.post("/v1/memories/", json=body, headers=_headers(alice)).json()["results"][0][
        "id"
    ]
    # Many requests of both projects in turn, over the pool's few server sessions.
    for _ in range(10):
        assert api.get(f"/v1/memories/{memory_id}/", headers=_headers(charlie)).status_code == 404
        found = _search(api, charlie, "PIN")
        assert found.json() == [], found.text
        assert api.get(f"/v1/memories/{memory_id}/", headers=_headers(alice)).status_code == 200


def test_a_statement_past_the_api_deadline_answers_503_through_the_pooler(
    committed_db: None, api: httpx.Client
) -> None:
    key = make_key("acme", "pooled").raw
    with memories_locked():
        started = time.monotonic()
        answer = _search(api, key, "bees")
        took = time.monotonic() - started
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "2"
    assert 1.0 < took < 10, took  # the API's 1.5 s, not the background's 5 minutes
    assert _search(api, key, "bees").status_code == 200


def test_no_setting_is_left_on_a_pooled_server_session(
    committed_db: None, api: httpx.Client, pooled_url: str
) -> None:
    key = make_key("acme", "pooled").raw
    for _ in range(5):
        assert _search(api, key, "tea").status_code == 200
    # Clients that set nothing, each in a transaction (so each holds a server session of its
    # own), see the server's defaults: no deadline or search setting stayed behind.
    with ExitStack() as stack:
        clients = [stack.enter_context(psycopg.connect(pooled_url)) for _ in range(6)]
        seen = {
            client.execute(
                "SELECT current_setting('statement_timeout'), current_setting('jit'), "
                "current_setting('hnsw.ef_search', true)"
            ).fetchall()[0]
            for client in clients
        }
    # (pgvector's ef_search is its default once the library is loaded, else not defined.)
    assert {(timeout, jit) for timeout, jit, _ in seen} == {("0", "on")}, seen
    assert {ef_search for _, _, ef_search in seen} <= {None, "", "40"}, seen


def test_a_background_process_has_its_own_deadlines_through_the_pooler(
    pooled_url: str,
) -> None:
    show = (
        "from django.db import connection, transaction\n"
        "c = connection.cursor(); c.execute('SHOW statement_timeout'); print(c.fetchone()[0])\n"
        "with transaction.atomic():\n"
        "    c.execute('SHOW lock_timeout'); print(c.fetchone()[0])\n"
        "    c.execute('SHOW jit'); print(c.fetchone()[0])\n"
    )
    env = {**os.environ, "DATABASE_URL": pooled_url, **POOLED}
    shell = [sys.executable, "manage.py", "shell", "-v", "0", "-c", show]
    done = subprocess.run(
        shell, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    background = settings.ENGRAM_DB_DEADLINES["background"]
    assert done.stdout.split() == [
        f"{background['statement_timeout'] // 60_000}min",
        f"{background['lock_timeout'] // 1000}s",
        "off",
    ]


def test_prepared_statements_follow_the_client_to_another_server_session(
    pooled_url: str,
) -> None:
    """psycopg prepares a statement on its fifth execution (here: its first). Another client's
    open transaction keeps the session it was prepared on, so the next execution runs on
    another, where PgBouncer (max_prepared_statements) prepares it again."""
    query = "SELECT count(*), pg_backend_pid() FROM pg_class WHERE relname = %s"
    with psycopg.connect(pooled_url, autocommit=True, prepare_threshold=0) as client, \
            psycopg.connect(pooled_url) as other:  # fmt: skip
        sessions = set()
        for n in range(20):
            count, session = client.execute(query, ["pg_class"]).fetchone() or (0, 0)
            assert count == 1
            sessions.add(session)
            if n % 2 == 0:
                other.execute("SELECT 1")  # holds the session that ran the last statement
            else:
                other.rollback()
    assert len(sessions) > 1, sessions  # it did move between server sessions
