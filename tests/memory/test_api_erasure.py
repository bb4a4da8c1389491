"""GDPR erasure through the API: DELETE /v2/entities/user/{id}/ hides at once, a worker erases."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from django.db import connection
from django.test import override_settings

from audit.models import ErasureRequest, PurgeRecord
from memory import actions
from memory.models import Memory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth, make_key, make_memory
from tests.memory.test_events import start_worker, stop, wait_for
from tests.webhooks.receiver import receiving
from webhooks import actions as webhook_actions
from webhooks.delivery import attempt
from webhooks.models import EVENT_TYPES, Delivery
from webhooks.render import render


class ApiErasureTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project
        with project_context(self.project.pk):
            add_texts(self.project, ["Alice likes tea", "Alice lives in Oslo"], user_id="alice")
            add_texts(self.project, ["Bob likes tea"], user_id="bob")

    def rows(self, **filters: Any) -> list[str]:
        with project_context(self.project.pk):
            return list(Memory.objects.filter(**filters).values_list("text", flat=True))

    def request_erasure(self, user: str = "alice") -> uuid.UUID:
        with self.captureOnCommitCallbacks(execute=False) as queued:
            response = self.call("delete", f"/v2/entities/user/{user}/")
        assert response.status_code == 202, response.content
        body = response.json()
        assert (body["status"], len(queued)) == ("PENDING", 1)  # the worker job, on commit
        return uuid.UUID(body["event_id"])

    def hook(self, url: str) -> None:
        with project_context(self.project.pk):
            webhook_actions.do_create_webhook(
                self.project.pk, name="mirror", url=url, event_types=EVENT_TYPES
            )

    def deliveries(self) -> list[Delivery]:
        with project_context(self.project.pk):
            return list(Delivery.objects.order_by("created_at"))

    def rendered(self) -> list[bytes]:
        """The body every delivery would be sent with now (those not dropped)."""
        with project_context(self.project.pk):
            bodies = [render(delivery) for delivery in self.deliveries()]
        return [body for body in bodies if isinstance(body, bytes)]

    def test_an_erasure_sends_webhooks_memory_ids_never_text_or_the_user_id(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            self.hook(receiver.url)
            with project_context(self.project.pk):
                dana = add_texts(
                    self.project, ["Dana's plan for Lisbon", "Dana keeps bees"], user_id="dana-x"
                )  # their memory_add deliveries still pending when she asks
            erasure = self.request_erasure("dana-x")
            while_pending = self.rendered()
            assert actions.do_run_erasure(self.project.pk, erasure) is True
            for delivery in self.deliveries():
                attempt(delivery.pk, self.project.pk)
        sent = [*while_pending, *(r.body for r in receiver.requests)]
        for secret in (b"Lisbon", b"bees", b"dana-x"):
            assert not [body for body in sent if secret in body], secret
        received = [json.loads(r.body) for r in receiver.requests]
        # One ids-only delete per memory hidden, then the erasure; the adds dropped.
        assert sorted(b["event_type"] for b in received) == [
            "erasure_complete", "memory_delete", "memory_delete",
        ]  # fmt: skip
        deleted = [b["event_details"] for b in received if b["event_type"] == "memory_delete"]
        assert {d["id"] for d in deleted} == {str(m.pk) for m in dana}
        assert {(d["event"], d["data"]["memory"], d["user_id"]) for d in deleted} == {
            ("DELETE", None, None)
        }

    def test_a_write_while_an_erasure_is_pending_announces_nothing(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            self.hook(receiver.url)
        self.request_erasure("alice")
        before = len(self.deliveries())
        with project_context(self.project.pk):
            add_texts(self.project, ["Alice keeps a diary"], user_id="alice")
        assert len(self.deliveries()) == before  # erased with the rest when the job runs
        assert not [body for body in self.rendered() if b"alice" in body.lower()]

    def test_the_memories_are_hidden_at_once_and_erased_by_the_job(self) -> None:
        erasure = self.request_erasure()
        assert self.active_texts() == {"Bob likes tea"}
        assert len(self.rows(user_id="alice")) == 2  # hidden, not yet erased
        assert self.call("get", f"/v1/erasures/{erasure}/").json()["status"] == "PENDING"

        assert actions.do_run_erasure(self.project.pk, erasure) is True
        assert self.rows(user_id="alice") == []
        assert self.rows(user_id="bob") == ["Bob likes tea"]
        status = self.call("get", f"/v1/erasures/{erasure}/").json()
        assert (status["status"], status["attempts"], status["error"]) == ("SUCCEEDED", 1, None)
        assert status["counts"]["memories"] == 2
        with project_context(self.project.pk):
            request = ErasureRequest.objects.get(pk=erasure)
            [record] = PurgeRecord.objects.filter(project=self.project)
        assert request.subject_id == ""  # the id in clear is gone with the rest
        assert record.subject_hash == request.subject_hash
        assert record.actor == f"api:{self.alice.key.prefix}"

    def test_a_finished_erasure_is_left_alone(self) -> None:
        erasure = self.request_erasure()
        actions.do_run_erasure(self.project.pk, erasure)
        assert actions.do_run_erasure(self.project.pk, erasure) is True
        with project_context(self.project.pk):
            assert PurgeRecord.objects.filter(project=self.project).count() == 1
            assert ErasureRequest.objects.get(pk=erasure).attempts == 1

    def test_purge_user_completes_a_pending_request(self) -> None:
        erasure = self.request_erasure()
        actions.do_erase_user(self.project, "alice", actor="command:purge_user")
        with project_context(self.project.pk):
            request = ErasureRequest.objects.get(pk=erasure)
        assert (request.status, request.subject_id) == ("SUCCEEDED", "")
        assert actions.do_run_erasure(self.project.pk, erasure) is True  # nothing left to do

    def test_a_failing_erasure_ends_failed_after_its_attempts(self) -> None:
        erasure = self.request_erasure()
        with project_context(self.project.pk):  # a request the function refuses every time
            ErasureRequest.objects.filter(pk=erasure).update(subject_id="")
        outcomes = [actions.do_run_erasure(self.project.pk, erasure) for _ in range(5)]
        assert outcomes == [False, False, False, True, True]
        status = self.call("get", f"/v1/erasures/{erasure}/").json()
        assert (status["status"], status["attempts"]) == ("FAILED", 4)
        assert status["error"] == "attempt 4: ValueError"

    def test_another_project_sees_no_erasure(self) -> None:
        erasure = self.request_erasure()
        assert self.call("get", f"/v1/erasures/{erasure}/", who=self.charlie).status_code == 404
        assert self.call("get", f"/v1/erasures/{uuid.uuid4()}/").status_code == 404
        assert self.call("get", "/v1/erasures/not-a-uuid/").status_code == 404

    def test_an_id_longer_than_any_stored_one_is_refused(self) -> None:
        for kind in ("user", "agent"):
            response = self.call("delete", f"/v2/entities/{kind}/{'x' * 256}/")
            assert response.status_code == 400
            assert "at most 255 characters" in response.json()["detail"]
        with project_context(self.project.pk):
            assert not ErasureRequest.objects.exists()
        assert self.active_texts() == {"Alice likes tea", "Alice lives in Oslo", "Bob likes tea"}

    def test_agents_apps_and_runs_are_only_deleted(self) -> None:
        with self.captureOnCommitCallbacks(execute=False) as queued:
            response = self.call("delete", "/v2/entities/agent/alices-bot/")
        assert (response.status_code, queued) == (200, [])
        with project_context(self.project.pk):
            assert not ErasureRequest.objects.exists()


def test_a_real_worker_erases_the_user(committed_db: None, client: Any) -> None:
    key = make_key("acme", "erasure-worker")
    project = key.key.project
    with project_context(project.pk):
        add_texts(project, ["Dana's plan for Lisbon"], user_id="dana")
    worker = start_worker()
    try:
        response = client.delete("/v2/entities/user/dana/", headers=auth(key.raw))
        assert response.status_code == 202
        erasure = response.json()["event_id"]

        def status() -> str:
            found = client.get(f"/v1/erasures/{erasure}/", headers=auth(key.raw))
            return str(found.json()["status"])

        assert wait_for(lambda: status() == "SUCCEEDED"), status()
    finally:
        stop(worker)
    with project_context(project.pk):
        assert not Memory.objects.filter(user_id="dana").exists()


def waiting_advisory_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def test_an_erasure_waits_for_a_write_in_progress_and_erases_it(committed_db: None) -> None:
    """An add (or an extraction applying its decisions) holds the user's lock: the erasure
    waits for it to commit, then erases what it wrote, so nothing of the user survives."""
    key = make_key("acme", "erasure-race")
    project = key.key.project
    written, release = threading.Event(), threading.Event()

    def write_in_progress() -> None:
        try:
            with project_context(project.pk):
                actions.hold_user(project.pk, "erin")
                make_memory(project, "Erin's flight number is LX 318", user_id="erin")
                written.set()
                release.wait(30)
        finally:
            connection.close()

    erased: dict[str, int] = {}

    def erase() -> None:
        try:
            erased.update(actions.do_erase_user(project, "erin", actor="test"))
        finally:
            connection.close()

    writer = threading.Thread(target=write_in_progress)
    writer.start()
    assert written.wait(30)
    eraser = threading.Thread(target=erase)
    eraser.start()
    assert wait_for(lambda: waiting_advisory_locks() > 0, 30)  # the erasure waits
    release.set()
    writer.join(30)
    eraser.join(30)
    assert erased["memories"] == 1  # the write committed first, then was erased
    with project_context(project.pk):
        assert not Memory.objects.filter(user_id="erin").exists()
