"""The outbox and the delivery, against a real local HTTP receiver.

Deliveries are attempted here with the plain function (webhooks.delivery.attempt), as the
worker's actor does; test_worker.py runs a real worker.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from audit.models import PurgeRecord
from memory import actions, jobs
from memory.models import Memory, MemoryHistory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts
from tests.memory.test_events import wait_for
from tests.webhooks.receiver import closed_port, receiving, verify
from webhooks import actions as webhook_actions
from webhooks.delivery import attempt, backoff, claim, sign
from webhooks.models import EVENT_TYPES, Delivery, Webhook


def queued_messages(delivery_id: uuid.UUID) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT message FROM dramatiq.queue WHERE message->'args'->>0 = %s", [str(delivery_id)]
        )
        return [row[0] if isinstance(row[0], dict) else json.loads(row[0]) for row in cursor]


class WebhookTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project
        self.pid = self.project.pk

    def hook(self, url: str, types: tuple[str, ...] = EVENT_TYPES) -> Webhook:
        with project_context(self.pid):
            return webhook_actions.do_create_webhook(
                self.pid, name="test hook", url=url, event_types=types
            )

    def add(self, text: str = "Alice likes green tea", user_id: str = "alice") -> Memory:
        with project_context(self.pid):
            return add_texts(self.project, [text], user_id=user_id)[0]

    def deliveries(self, **filters: Any) -> list[Delivery]:
        with project_context(self.pid):
            return list(Delivery.objects.filter(**filters).order_by("created_at"))

    def run_due(self, delivery: Delivery) -> float | None:
        """One attempt at the delivery, made due first (the backoff skipped)."""
        with project_context(self.pid):
            Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
        return attempt(delivery.pk, self.pid)

    def refreshed(self, delivery: Delivery) -> Delivery:
        with project_context(self.pid):
            return Delivery.objects.select_related("webhook").get(pk=delivery.pk)


class OutboxTestCase(WebhookTestCase):
    def test_a_change_writes_its_delivery_and_message_in_its_transaction(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            hook = self.hook(receiver.url, ("memory_add",))
        memory = self.add()
        [delivery] = self.deliveries()
        assert (delivery.webhook_id, delivery.event_type, delivery.memory_id) == (
            hook.pk,
            "memory_add",
            memory.pk,
        )
        assert delivery.status == "PENDING" and delivery.attempts == 0
        [message] = queued_messages(delivery.pk)
        # The trigger's message is the one memory.jobs.DELIVER_WEBHOOK would send.
        expected = jobs.DELIVER_WEBHOOK.message(str(delivery.pk), str(self.pid))
        assert (message["actor_name"], message["queue_name"], message["args"]) == (
            expected.actor_name,
            expected.queue_name,
            list(expected.args),
        )

    def test_a_rolled_back_change_leaves_no_delivery(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            self.hook(receiver.url)
        with pytest.raises(RuntimeError), project_context(self.pid):
            add_texts(self.project, ["Alice likes green tea"], user_id="alice")
            raise RuntimeError("the request fails after the write")
        assert self.deliveries() == []
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM dramatiq.queue WHERE message->'args'->>1 = %s",
                [str(self.pid)],
            )
            assert cursor.fetchone() == (0,)

    def test_the_outbox_holds_ids_only(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            self.hook(receiver.url)
        self.add("Alice's secret plan", user_id="alice-the-user")
        with connection.cursor(), project_context(self.pid), connection.cursor() as cursor:
            cursor.execute("SELECT row_to_json(d)::text FROM webhooks_delivery d")
            rows = " ".join(row[0] for row in cursor.fetchall())
        assert rows and "secret plan" not in rows and "alice-the-user" not in rows

    def test_it_maps_each_history_event_to_a_webhook_event(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            self.hook(receiver.url)
        memory = self.add()
        with project_context(self.pid):
            actions.do_update_memory(memory, actor="test", text="Alice likes black tea")
            actions.do_delete_memory(Memory.objects.get(pk=memory.pk), actor="test")
            actions.do_restore_memory(Memory.objects.get(pk=memory.pk), actor="test")
        assert [d.event_type for d in self.deliveries()] == [
            "memory_add",
            "memory_update",
            "memory_delete",
            "memory_update",
        ]

    def test_it_sends_memory_categorize_when_categories_are_set_or_change(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            self.hook(receiver.url, ("memory_categorize",))
        memory_id = uuid.uuid4()

        def history(event: str, categories: list[str]) -> None:
            MemoryHistory.objects.create(
                project_id=self.pid, memory_id=memory_id, event=event, new_memory="Tea",
                actor="test", categories=categories, created_at=timezone.now(),
            )  # fmt: skip

        with project_context(self.pid):
            history("ADD", [])  # none yet
            history("UPDATE", ["food"])  # set
            history("UPDATE", ["food"])  # unchanged
            history("UPDATE", ["food", "health"])  # changed
        assert len(self.deliveries(event_type="memory_categorize")) == 2

    def test_only_enabled_subscribed_webhooks_of_the_project_get_deliveries(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            deletes = self.hook(receiver.url, ("memory_delete",))
            disabled = self.hook(receiver.url, ("memory_add",))
            adds = self.hook(receiver.url, ("memory_add",))
            with project_context(self.pid):
                webhook_actions.do_update_webhook(disabled, is_active=False)
        self.add()
        assert [d.webhook_id for d in self.deliveries()] == [adds.pk]
        assert deletes.pk != adds.pk
        with project_context(self.charlie.key.project_id):
            add_texts(self.charlie.key.project, ["Charlie likes tea"], user_id="charlie")
        assert len(self.deliveries()) == 1


class DeliveryTestCase(WebhookTestCase):
    def test_it_delivers_a_signed_body_once(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            hook = self.hook(receiver.url, ("memory_add",))
            memory = self.add()
            [delivery] = self.deliveries()
            assert attempt(delivery.pk, self.pid) is None
            assert attempt(delivery.pk, self.pid) is None  # a duplicate message: nothing sent
        [received] = receiver.requests
        assert verify(received, hook.secret)
        assert not verify(received, "whsec_another")
        assert received.headers["Engram-Event"] == "memory_add"
        assert received.headers["Engram-Delivery"] == str(delivery.pk)
        body = json.loads(received.body)
        assert body["event_type"] == "memory_add"
        assert body["delivery_id"] == str(delivery.pk)
        details = body["event_details"]
        assert (details["id"], details["event"], details["data"]) == (
            str(memory.pk),
            "ADD",
            {"memory": "Alice likes green tea"},
        )
        assert details["user_id"] == "alice"
        done = self.refreshed(delivery)
        assert (done.status, done.attempts, done.last_status, done.last_error) == (
            "DELIVERED",
            1,
            204,
            "",
        )

    def test_the_signature_covers_the_timestamp_and_the_body(self) -> None:
        header = sign("whsec_x", 1700000000, b'{"a":1}')
        assert header.startswith("t=1700000000,v1=")
        assert header != sign("whsec_x", 1700000001, b'{"a":1}')
        assert header != sign("whsec_x", 1700000000, b'{"a":2}')

    def test_a_receiver_that_answers_500_is_retried_then_the_webhook_is_disabled(self) -> None:
        with (
            receiving("error") as receiver,
            override_settings(
                ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host],
                ENGRAM_WEBHOOK_MAX_ATTEMPTS=3,
                ENGRAM_WEBHOOK_DISABLE_AFTER=3,
            ),
        ):
            self.hook(receiver.url, ("memory_add",))
            self.add()
            [delivery] = self.deliveries()
            first = self.run_due(delivery)
            failed = self.refreshed(delivery)
            assert first is not None and first > 0
            assert (failed.status, failed.attempts, failed.last_status) == ("PENDING", 1, 500)
            assert failed.last_error == "the receiver answered 500"
            assert len(failed.last_response) == 200  # a prefix of the 5,000 bytes
            assert failed.next_attempt_at > timezone.now()
            assert self.run_due(delivery) is not None
            assert self.run_due(delivery) is None  # the last attempt
            assert self.run_due(delivery) is None  # and nothing more
        assert len(receiver.requests) == 3
        done = self.refreshed(delivery)
        assert (done.status, done.attempts) == ("FAILED", 3)
        assert done.webhook.enabled is False
        assert "3 failed attempts in a row" in done.webhook.disabled_reason
        assert "500" in done.webhook.disabled_reason

    def test_a_disabled_webhook_keeps_its_deliveries_until_enabled_again(self) -> None:
        with (
            receiving("error") as receiver,
            override_settings(
                ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host], ENGRAM_WEBHOOK_DISABLE_AFTER=1
            ),
        ):
            hook = self.hook(receiver.url, ("memory_add",))
            self.add()
            [delivery] = self.deliveries()
            assert self.run_due(delivery) is not None
            assert self.refreshed(delivery).webhook.enabled is False
            assert self.run_due(delivery) is None  # disabled: not sent, still PENDING
            assert (self.refreshed(delivery).status, len(receiver.requests)) == ("PENDING", 1)
            self.add("Alice likes coffee")  # no delivery for a disabled webhook
            assert len(self.deliveries()) == 1
            receiver.mode = "ok"
            with self.captureOnCommitCallbacks(execute=False) as sends, project_context(self.pid):
                assert webhook_actions.do_enable_webhook(hook) == 1
            assert len(sends) == 1
            assert attempt(delivery.pk, self.pid) is None
        assert self.refreshed(delivery).status == "DELIVERED"
        assert self.refreshed(delivery).webhook.consecutive_failures == 0

    def test_a_receiver_that_is_down_is_retried(self) -> None:
        port = closed_port()
        with override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[f"127.0.0.1:{port}"]):
            self.hook(f"http://127.0.0.1:{port}/hook", ("memory_add",))
            self.add()
            [delivery] = self.deliveries()
            assert self.run_due(delivery) is not None
        failed = self.refreshed(delivery)
        assert (failed.status, failed.last_status) == ("PENDING", None)
        assert failed.last_error.startswith("ConnectError")

    def test_a_slow_receiver_times_out(self) -> None:
        with (
            receiving("slow", delay=3) as receiver,
            override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host], ENGRAM_WEBHOOK_TIMEOUT=1),
        ):
            self.hook(receiver.url, ("memory_add",))
            self.add()
            [delivery] = self.deliveries()
            assert self.run_due(delivery) is not None
        failed = self.refreshed(delivery)
        assert (failed.status, failed.last_status) == ("PENDING", None)
        assert "Timeout" in failed.last_error

    def test_a_receiver_that_drips_its_answer_fails_at_the_timeout(self) -> None:
        # One byte every 0.4 s: no read waits a second, the whole answer would take 16 s.
        with (
            receiving("drip", delay=0.4) as receiver,
            override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host], ENGRAM_WEBHOOK_TIMEOUT=1),
        ):
            self.hook(receiver.url, ("memory_add",))
            self.add()
            [delivery] = self.deliveries()
            assert self.run_due(delivery) is not None
            assert wait_for(lambda: bool(receiver.dripped), seconds=10)
        failed = self.refreshed(delivery)
        assert (failed.status, failed.last_status) == ("PENDING", None)
        assert "deadline of 1 s" in failed.last_error
        assert failed.webhook.consecutive_failures == 1
        [sent] = receiver.dripped  # the worker hung up long before the answer's end
        assert sent < 12, sent

    def test_an_attempt_whose_worker_died_is_recorded_as_failed(self) -> None:
        with (
            receiving() as receiver,
            override_settings(
                ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host], ENGRAM_WEBHOOK_DISABLE_AFTER=1
            ),
        ):
            self.hook(receiver.url, ("memory_add",))
            self.add()
            [delivery] = self.deliveries()
            assert claim(delivery.pk, self.pid) is not None  # a worker takes it, and dies
            with project_context(self.pid):
                expired = timezone.now() - timedelta(seconds=1)
                Delivery.objects.filter(pk=delivery.pk).update(lease_until=expired)
            assert self.run_due(delivery) is None  # the lost attempt disabled the webhook
        lost = self.refreshed(delivery)
        assert (lost.status, lost.attempts, lost.lease_until) == ("PENDING", 1, None)
        assert "ended with its worker" in lost.last_error
        assert (lost.webhook.enabled, lost.webhook.consecutive_failures) == (False, 1)
        assert "ended with its worker" in lost.webhook.disabled_reason
        assert receiver.requests == []

    def test_a_redirect_is_not_followed(self) -> None:
        with (
            receiving("redirect") as receiver,
            override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]),
        ):
            self.hook(receiver.url, ("memory_add",))
            self.add()
            [delivery] = self.deliveries()
            assert self.run_due(delivery) is not None
        assert [r.path for r in receiver.requests] == ["/hook"]
        assert "redirect (not followed)" in self.refreshed(delivery).last_error

    def test_the_url_is_checked_again_at_delivery(self) -> None:
        with receiving() as receiver:
            with override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
                self.hook(receiver.url, ("memory_add",))
                self.add()
            [delivery] = self.deliveries()
            assert self.run_due(delivery) is not None  # the operator no longer allows it
        assert receiver.requests == []
        assert "loopback, private" in self.refreshed(delivery).last_error

    def test_backoff_grows_and_is_capped(self) -> None:
        assert 22 <= backoff(1) <= 38
        assert 45 <= backoff(2) <= 75
        assert backoff(20) <= 3600 * 1.25


class ErasureTestCase(WebhookTestCase):
    def test_a_user_erased_before_delivery_is_dropped_and_the_erasure_announced(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            hook = self.hook(receiver.url, ("memory_add", "erasure_complete"))
            self.add("Dana's plan for Lisbon", user_id="dana")
            [added] = self.deliveries()
            actions.do_erase_user(self.pid, "dana", actor="test")
            assert attempt(added.pk, self.pid) is None
            [erased] = self.deliveries(event_type="erasure_complete")
            assert attempt(erased.pk, self.pid) is None
        dropped = self.refreshed(added)
        assert (dropped.status, dropped.attempts) == ("DROPPED", 1)
        assert "history row is gone" in dropped.last_error
        [received] = receiver.requests
        assert verify(received, hook.secret)
        assert b"dana" not in received.body and b"Lisbon" not in received.body
        body = json.loads(received.body)
        with project_context(self.pid):
            record = PurgeRecord.objects.get()
        assert body["event_type"] == "erasure_complete"
        assert body["event_details"]["id"] == str(record.pk)
        assert body["event_details"]["data"]["counts"]["memories"] == 1

    def test_an_erasure_asked_through_the_api_names_its_request(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            self.hook(receiver.url, ("erasure_complete",))
            self.add("Dana's plan for Lisbon", user_id="dana")
            with self.captureOnCommitCallbacks(execute=False):
                request_id = self.call("delete", "/v2/entities/user/dana/").json()["event_id"]
            assert actions.do_run_erasure(self.pid, uuid.UUID(request_id))
            [erased] = self.deliveries(event_type="erasure_complete")
            assert attempt(erased.pk, self.pid) is None
        body = json.loads(receiver.requests[0].body)
        assert body["event_details"]["data"]["erasure_request_ids"] == [request_id]

    def test_a_memory_redacted_before_delivery_is_dropped(self) -> None:
        with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
            self.hook(receiver.url, ("memory_add", "memory_delete"))
            memory = self.add("Alice's card number 4242")
            with project_context(self.pid):
                actions.do_redact_memory(memory, actor="test", reason="asked")
            added, redacted = self.deliveries()
            assert attempt(added.pk, self.pid) is None
            assert attempt(redacted.pk, self.pid) is None
        assert self.refreshed(added).status == "DROPPED"
        assert "redacted" in self.refreshed(added).last_error
        [received] = receiver.requests  # the redaction itself, without any text
        assert b"4242" not in received.body
        details = json.loads(received.body)["event_details"]
        assert (details["event"], details["data"]) == ("REDACT", {"memory": None})


def test_due_after_a_while_and_no_message_the_sweeper_sends_it_again(
    db: None,
) -> None:
    from tests.factory import make_key
    from webhooks.sweep import stranded_deliveries

    key = make_key("acme", "sweeper")
    pid = key.key.project_id
    with (
        receiving() as receiver,
        override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]),
        project_context(pid),
    ):
        webhook_actions.do_create_webhook(
            pid, name="h", url=receiver.url, event_types=["memory_add"]
        )
        add_texts(key.key.project, ["Alice likes tea"], user_id="alice")
        delivery = Delivery.objects.get()
    now = timezone.now()
    later = now + timedelta(minutes=5)
    assert stranded_deliveries(later, timedelta(minutes=1)) == []  # its message is queued
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM dramatiq.queue WHERE queue_name = 'webhooks'")
    assert stranded_deliveries(now, timedelta(minutes=1)) == []  # not due for long enough
    assert stranded_deliveries(later, timedelta(minutes=1)) == [(str(delivery.pk), str(pid))]


def test_the_sweep_command_sends_stranded_deliveries_again(db: None) -> None:
    from io import StringIO

    from django.core.management import call_command

    from tests.factory import make_key

    key = make_key("acme", "sweep-command")
    pid = key.key.project_id
    with (
        override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=["127.0.0.1:8765"]),
        project_context(pid),
    ):
        webhook_actions.do_create_webhook(
            pid, name="h", url="http://127.0.0.1:8765/h", event_types=["memory_add"]
        )
        add_texts(key.key.project, ["Alice likes tea"], user_id="alice")
        Delivery.objects.update(next_attempt_at=timezone.now() - timedelta(minutes=5))
        delivery = Delivery.objects.get()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM dramatiq.queue WHERE queue_name = 'webhooks'")
    out = StringIO()
    call_command("sweep_events", stdout=out)
    assert out.getvalue().strip() == "re-sent 1 webhook deliveries"
    assert len(queued_messages(delivery.pk)) == 1
    call_command("sweep_events", stdout=out)  # its message is queued now: nothing more
    assert len(queued_messages(delivery.pk)) == 1


class ActorTestCase(WebhookTestCase):
    def test_the_actor_asks_for_a_retry_with_the_backoff_and_ends_otherwise(self) -> None:
        import dramatiq

        from webhooks.tasks import deliver_webhook

        with (
            receiving("error") as receiver,
            override_settings(
                ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host], ENGRAM_WEBHOOK_MAX_ATTEMPTS=2
            ),
        ):
            self.hook(receiver.url, ("memory_add",))
            self.add()
            [delivery] = self.deliveries()
            with pytest.raises(dramatiq.Retry) as retry:
                deliver_webhook.fn(str(delivery.pk), str(self.pid))
            assert retry.value.delay is not None and 22_000 <= retry.value.delay <= 38_000
            with project_context(self.pid):
                Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
            deliver_webhook.fn(str(delivery.pk), str(self.pid))  # the last: no retry
        assert self.refreshed(delivery).status == "FAILED"
        deliver_webhook.fn("not-a-uuid", str(self.pid))  # ends at once
        deliver_webhook.fn(str(uuid.uuid4()), str(self.pid))  # gone: ends
