"""Database deadlines: a request whose statement runs past them answers 503 and changes nothing.

The deadlines are the session's statement_timeout and lock_timeout (config.deadlines). A
statement made to wait is the one way to exceed them on purpose: another session holds an
exclusive lock on the memories' table while the request runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import OperationalError, connection
from django.test import override_settings

from audit.models import AccessLog
from config import deadlines
from config.exceptions import deadline_exceeded
from memory.models import Memory
from tenants.db import project_context
from tests.factory import add_texts, auth, make_key

ROOT = settings.BASE_DIR


def _dsn() -> dict[str, Any]:
    found = connection.settings_dict
    return {
        "dbname": found["NAME"],
        "user": found["USER"],
        "password": found["PASSWORD"],
        "host": found["HOST"],
        "port": found["PORT"],
    }


@contextmanager
def held(*statements: tuple[str, list[Any]]) -> Iterator[None]:
    """Another session runs `statements` in a transaction it keeps open until the block ends
    (the locks they take held as long)."""
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(**_dsn()) as other:
            for statement, params in statements:
                other.execute(statement, params)
            locked.set()
            release.wait(30)
            other.rollback()

    thread = threading.Thread(target=hold)
    thread.start()
    assert locked.wait(10)
    yield
    release.set()
    thread.join(30)


def memories_locked() -> Any:
    """An exclusive lock on the memories' table: every statement that reads or writes memories
    waits for it."""
    return held(("LOCK TABLE memory_memory IN ACCESS EXCLUSIVE MODE", []))


def memory_row_locked(project_id: Any, memory_id: Any) -> Any:
    """One memory's row locked (FOR UPDATE): an update of that memory waits, nothing else."""
    return held(
        ("SELECT set_config('engram.project_id', %s, true)", [str(project_id)]),
        ("SELECT 1 FROM memory_memory WHERE id = %s FOR UPDATE", [memory_id]),
    )


def _api_deadlines(statement_ms: int, lock_ms: int) -> Any:
    return override_settings(
        ENGRAM_DB_DEADLINES={
            **settings.ENGRAM_DB_DEADLINES,
            "api": {"statement_timeout": statement_ms, "lock_timeout": lock_ms},
        }
    )


@pytest.fixture
def api_session() -> Iterator[None]:
    """This process's sessions under API deadlines (as the web server's), then back."""
    yield
    deadlines.use("background")


@pytest.mark.parametrize(
    "case",
    [(300, 0, "57014"), (0, 300, "55P03")],
    ids=["statement_timeout", "lock_timeout"],
)
def test_an_add_past_a_deadline_is_a_503_that_changes_nothing(
    committed_db: None,
    api_session: None,
    client: Any,
    caplog: pytest.LogCaptureFixture,
    case: tuple[int, int, str],
) -> None:
    """Past statement_timeout (57014) or lock_timeout (55P03): Retry-After, nothing stored, the
    access log records the 503 under the request's id, and the log names the SQLSTATE."""
    statement_ms, lock_ms, sqlstate = case
    key = make_key("acme", "deadline")
    body = {"messages": [{"role": "user", "content": "I keep bees."}], "user_id": "alice",
            "infer": False}  # fmt: skip
    with _api_deadlines(statement_ms, lock_ms):
        deadlines.use("api")
        with memories_locked():
            response = client.post("/v1/memories/", body, content_type="application/json",
                                   headers=auth(key.raw))  # fmt: skip
    assert response.status_code == 503, response.content
    assert response.headers["Retry-After"] == "2"
    assert "nothing was changed" in response.json()["detail"]
    with project_context(key.key.project_id):
        assert not Memory.objects.exists()
        row = AccessLog.objects.get(request_id=response.headers["X-Request-ID"])
    assert row.status == 503
    assert f"database deadline exceeded (SQLSTATE {sqlstate})" in caplog.text


def test_a_search_past_the_statement_deadline_is_a_503(
    committed_db: None, api_session: None, client: Any
) -> None:
    key = make_key("acme", "deadline")
    with _api_deadlines(300, 0):
        deadlines.use("api")
        with memories_locked():
            response = client.post("/v2/memories/search/",
                                   {"query": "bees", "filters": {"user_id": "alice"}},
                                   content_type="application/json",
                                   headers=auth(key.raw))  # fmt: skip
    assert response.status_code == 503, response.content
    assert response.headers["Retry-After"] == "2"


def _show(code: str, env: dict[str, str] | None = None) -> str:
    """`SHOW …` values printed by a fresh process that ran `code` first."""
    script = (
        "import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings')\n"
        f"{code}\n"
        "from django.db import connection\n"
        "with connection.cursor() as c:\n"
        "    c.execute('SELECT current_setting(%s), current_setting(%s), current_setting(%s)',"
        " ['statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout'])\n"
        "    print(' '.join(c.fetchone()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def test_the_web_server_runs_under_the_api_deadlines_and_others_under_the_background_ones() -> None:
    env = {
        "ENGRAM_API_STATEMENT_TIMEOUT_MS": "1234",
        "ENGRAM_API_LOCK_TIMEOUT_MS": "567",
        "ENGRAM_BACKGROUND_STATEMENT_TIMEOUT_MS": "89000",
        "ENGRAM_BACKGROUND_LOCK_TIMEOUT_MS": "4500",
        "ENGRAM_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS": "42000",
    }
    assert _show("import config.wsgi", env) == "1234ms 567ms 42s"
    assert _show("import config.asgi", env) == "1234ms 567ms 42s"
    assert _show("import django; django.setup()", env) == "89s 4500ms 42s"
    migrate = (
        "import django; django.setup()\nfrom config import deadlines; deadlines.use('migrate')"
    )
    assert _show(migrate, env) == "0 4500ms 42s"


# --- One budget for all of a request's statements ---------------------------------------------


def _sleep(seconds: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(%s)", [seconds])


def _statement_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('statement_timeout')")
        return str(cursor.fetchone()[0])


@override_settings(ENGRAM_API_REQUEST_BUDGET_MS=1500)
def test_a_requests_statements_share_one_budget(committed_db: None, api_session: None) -> None:
    """Two statements of 1 s each, both under the 2 s statement deadline: the second is
    cancelled when the request's 1.5 s are used up, and the session gets its deadline back."""
    with _api_deadlines(2000, 0):
        deadlines.use("api")
        with deadlines.request_budget():
            _sleep(1)
            with pytest.raises(OperationalError) as raised:
                _sleep(1)
        assert deadline_exceeded(raised.value)
        assert _statement_timeout() == "2s"


@override_settings(ENGRAM_API_REQUEST_BUDGET_MS=500)
def test_no_statement_is_sent_once_the_budget_is_used_up(
    committed_db: None, api_session: None
) -> None:
    with _api_deadlines(2000, 0):
        deadlines.use("api")
        with deadlines.request_budget():
            time.sleep(0.6)  # the request's own work (the embedder, say) used it all
            with pytest.raises(OperationalError, match=r"budget of 0\.5 s") as raised:
                _sleep(0)
        assert deadline_exceeded(raised.value)


def test_a_request_past_its_budget_is_a_503_that_changes_nothing(
    committed_db: None, api_session: None, client: Any
) -> None:
    """An add whose statement waits on a lock, with no statement deadline at all: the
    request's budget ends it, 503 with Retry-After, nothing stored."""
    key = make_key("acme", "budget")
    body = {"messages": [{"role": "user", "content": "I keep bees."}], "user_id": "alice",
            "infer": False}  # fmt: skip
    with _api_deadlines(0, 0), override_settings(ENGRAM_API_REQUEST_BUDGET_MS=400):
        deadlines.use("api")
        with memories_locked():
            response = client.post("/v1/memories/", body, content_type="application/json",
                                   headers=auth(key.raw))  # fmt: skip
    assert response.status_code == 503, response.content
    assert response.headers["Retry-After"] == "2"
    with project_context(key.key.project_id):
        assert not Memory.objects.exists()


def test_a_statement_past_its_lock_deadline_late_in_a_request_is_a_503(
    committed_db: None, api_session: None, client: Any
) -> None:
    """An update waits past lock_timeout once the request has used more than its budget's
    slack: the transaction's rollback (a ROLLBACK TO SAVEPOINT) still goes through the
    budget, and the answer is the deadline's 503, not a 500."""
    key = make_key("acme", "late-deadline")
    with project_context(key.key.project_id):
        [memory] = add_texts(key.key.project, ["I keep bees."], user_id="alice")
    with _api_deadlines(0, 600), override_settings(ENGRAM_API_REQUEST_BUDGET_MS=5000):
        deadlines.use("api")
        with memory_row_locked(key.key.project_id, memory.pk):
            response = client.put(f"/v1/memories/{memory.pk}/", {"text": "I keep wasps."},
                                  content_type="application/json",
                                  headers=auth(key.raw))  # fmt: skip
    assert response.status_code == 503, response.content
    with project_context(key.key.project_id):
        assert Memory.objects.get(pk=memory.pk).text == "I keep bees."
