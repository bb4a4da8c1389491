"""Idempotency-Key on add: a retry gets the first answer, and nothing is stored twice."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import timedelta
from typing import Any
from unittest import mock

import httpx
import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.models import AccessLog
from memory import actions
from memory.actions import adds
from memory.models import IdempotentRequest, Memory, MemoryEvent, MemoryHistory
from tenants.actions import NewApiKey
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import auth, make_key

FACT = {"messages": "I drink oolong", "user_id": "alice", "infer": False}
QUEUED = {"messages": "I moved to Lisbon last year.", "user_id": "alice"}


class IdempotencyTestCase(BaseTestCase):
    def add(
        self,
        body: Any,
        key: str | None,
        path: str = "/v3/memories/add/",
        who: NewApiKey | None = None,
    ) -> Any:
        headers = auth((who or self.alice).raw)
        if key is not None:
            headers["Idempotency-Key"] = key
        data = body if isinstance(body, str) else json.dumps(body)
        return self.client.post(path, data, content_type="application/json", headers=headers)

    def count(self, model: Any, who: NewApiKey | None = None) -> int:
        with project_context((who or self.alice).key.project_id):
            return int(model.objects.count())

    def test_a_retried_stored_add_returns_the_first_answer_and_stores_once(self) -> None:
        first = self.add(FACT, "retry-key-0001")
        again = self.add(FACT, "retry-key-0001")
        assert first.status_code == again.status_code == 200
        assert again.json() == first.json()
        assert [r["event"] for r in again.json()["results"]] == ["ADD"]  # not NONE: replayed
        assert again["Idempotent-Replayed"] == "true"
        assert not first.has_header("Idempotent-Replayed")
        assert self.count(Memory) == 1
        assert self.count(MemoryHistory) == 1

    def test_a_retried_queued_add_returns_the_same_event(self) -> None:
        first = self.add(QUEUED, "retry-key-0002")
        again = self.add(QUEUED, "retry-key-0002")
        assert again.status_code == 200
        assert again.json() == first.json()
        assert first.json()["status"] == "PENDING"
        assert self.count(MemoryEvent) == 1

    def test_the_v1_path_replays_its_own_shape(self) -> None:
        first = self.add(QUEUED, "retry-key-0003", path="/v1/memories/")
        again = self.add(QUEUED, "retry-key-0003", path="/v1/memories/")
        assert isinstance(first.json(), list)
        assert again.json() == first.json()
        stored = self.add(FACT, "retry-key-0004", path="/v1/memories/")
        assert self.add(FACT, "retry-key-0004", path="/v1/memories/").json() == stored.json()
        assert self.count(MemoryEvent) == 1
        assert self.count(Memory) == 1

    def test_without_a_key_each_add_is_new(self) -> None:
        first = self.add(QUEUED, None)
        second = self.add(QUEUED, None)
        assert first.json()["event_id"] != second.json()["event_id"]
        assert self.count(IdempotentRequest) == 0

    def test_a_retry_may_reorder_or_reformat_the_json(self) -> None:
        first = self.add(FACT, "retry-key-0005")
        reordered = '{ "infer": false,\n "user_id": "alice", "messages": "I drink oolong" }'
        assert self.add(reordered, "retry-key-0005").json() == first.json()

    def test_the_same_key_with_another_body_is_a_conflict_that_changes_nothing(self) -> None:
        self.add(FACT, "retry-key-0006")
        other = self.add({**FACT, "messages": "I drink sencha"}, "retry-key-0006")
        assert other.status_code == 409
        assert "Idempotency-Key" in other.json()["detail"]
        assert self.count(Memory) == 1
        assert self.active_texts() == {"I drink oolong"}

    def test_the_same_key_on_the_other_add_path_is_a_conflict(self) -> None:
        self.add(FACT, "retry-key-0007")
        assert self.add(FACT, "retry-key-0007", path="/v1/memories/").status_code == 409

    def test_a_key_belongs_to_one_project(self) -> None:
        mine = self.add(QUEUED, "shared-key-01")
        theirs = self.add(QUEUED, "shared-key-01", who=self.charlie)
        assert theirs.status_code == 200
        assert theirs.json()["event_id"] != mine.json()["event_id"]
        assert self.count(MemoryEvent, who=self.charlie) == 1
        # and a different body in another project is no conflict either
        other = self.add({**FACT, "user_id": "dave"}, "shared-key-02", who=self.charlie)
        assert other.status_code == 200
        assert self.add(FACT, "shared-key-02").status_code == 200

    def test_a_queued_add_with_a_key_is_one_transaction_without_savepoints(self) -> None:
        self.add(QUEUED, "warm-key-0001")  # the key's lookup is cached after the first request
        with CaptureQueriesContext(connection) as captured:
            assert self.add(QUEUED, "queued-key-0001").status_code == 200
        statements = [q["sql"].split()[0] for q in captured.captured_queries]
        # 1 the key; the view's transaction: 2 set the tenant, 3 claim the key, 4 the event,
        # 5 the answer recorded with the key, 6 the access log. The view's transaction is a
        # savepoint here, with the tenant restored at its end, only because the test runs in a
        # transaction; a real request has BEGIN and COMMIT instead. The steps inside it take no
        # savepoint of their own.
        expected = "SELECT SAVEPOINT SELECT INSERT INSERT UPDATE INSERT SELECT RELEASE"
        assert " ".join(statements) == expected

    def test_a_malformed_key_is_a_400_that_stores_nothing(self) -> None:
        for key in ("short", "x" * 129, "has space", "semi;colon", "ümlaut-key", ""):
            response = self.add(FACT, key)
            assert response.status_code == 400, key
            assert "Idempotency-Key" in response.json()["errors"], key
        assert self.count(Memory) == 0
        assert self.add(FACT, "a" * 128).status_code == 200
        assert self.add(FACT, "Ok.key_1:2-3").status_code == 200

    def test_an_invalid_body_is_not_remembered(self) -> None:
        assert self.add({"messages": []}, "retry-key-0008").status_code == 400
        assert self.add(FACT, "retry-key-0008").status_code == 200

    def test_a_failed_add_leaves_no_record_and_the_retry_runs(self) -> None:
        self.client.raise_request_exception = False
        with mock.patch.object(adds, "do_add_messages", side_effect=DatabaseError("boom")):
            assert self.add(FACT, "retry-key-0009").status_code == 500
        assert self.count(IdempotentRequest) == 0
        retried = self.add(FACT, "retry-key-0009")
        assert retried.status_code == 200
        assert not retried.has_header("Idempotent-Replayed")
        assert self.count(Memory) == 1

    def test_the_replay_is_in_the_access_log(self) -> None:
        self.add(FACT, "retry-key-0010")
        again = self.add(FACT, "retry-key-0010")
        with project_context(self.alice.key.project_id):
            row = AccessLog.objects.get(request_id=again["X-Request-ID"])
        assert (row.status, row.scope) == (200, {"user_id": "alice"})

    @override_settings(ENGRAM_IDEMPOTENCY_HOURS=24)
    def test_an_expired_key_is_new_again_and_purged(self) -> None:
        first = self.add(QUEUED, "retry-key-0011")
        with project_context(self.alice.key.project_id):
            IdempotentRequest.objects.update(created_at=timezone.now() - timedelta(hours=25))
        second = self.add({**QUEUED, "messages": "I live in Porto."}, "retry-key-0011")
        assert second.status_code == 200
        assert second.json()["event_id"] != first.json()["event_id"]
        assert self.add({**QUEUED, "messages": "I live in Porto."}, "retry-key-0011").json() == (
            second.json()
        )
        with project_context(self.alice.key.project_id):
            IdempotentRequest.objects.update(created_at=timezone.now() - timedelta(hours=25))
        self.add(QUEUED, "retry-key-0012")  # fresh: kept
        call_command("purge_expired", verbosity=0)
        with project_context(self.alice.key.project_id):
            assert list(IdempotentRequest.objects.values_list("key", flat=True)) == [
                "retry-key-0012"
            ]


def post(url: str, raw_key: str, body: dict[str, Any], key: str) -> tuple[int, Any, bool]:
    headers = {"Authorization": f"Token {raw_key}", "Idempotency-Key": key}
    response = httpx.post(url, json=body, headers=headers, timeout=30)
    replayed = response.headers.get("Idempotent-Replayed") == "true"
    return response.status_code, response.json(), replayed


@pytest.mark.parametrize(("second_body", "second_status"), [(FACT, 200), (QUEUED, 409)])
def test_concurrent_retries_with_one_key_store_once(
    live_api: str, second_body: dict[str, Any], second_status: int
) -> None:
    """Two requests with one key at once: the second waits for the first's transaction on the
    key's unique index, then replays its answer (or refuses another body) — never stores."""
    new = make_key("acme", f"race-{uuid.uuid4().hex[:8]}")
    claim = actions.do_claim_idempotency_key
    claimed = threading.Event()

    def slow_claim(*args: Any, **kwargs: Any) -> bool:
        taken = claim(*args, **kwargs)
        if taken:
            claimed.set()
            time.sleep(0.5)  # hold the key, uncommitted, while the retry arrives
        return taken

    url = f"{live_api}/v3/memories/add/"
    results: dict[str, tuple[int, Any, bool]] = {}
    with mock.patch.object(actions, "do_claim_idempotency_key", slow_claim):
        first = threading.Thread(
            target=lambda: results.__setitem__("first", post(url, new.raw, FACT, "race-key-01"))
        )
        first.start()
        assert claimed.wait(10)
        started = time.perf_counter()
        results["second"] = post(url, new.raw, second_body, "race-key-01")
        waited = time.perf_counter() - started
        first.join(30)
    assert waited > 0.2  # it waited for the first request's transaction
    status, body, replayed = results["first"]
    assert (status, replayed) == (200, False)
    assert results["second"][0] == second_status
    if second_status == 200:
        assert results["second"][1:] == (body, True)
    with project_context(new.key.project_id):
        assert Memory.objects.count() == 1
        assert MemoryEvent.objects.count() == 0
        assert IdempotentRequest.objects.count() == 1
