"""End to end: the official Python client manages webhooks on a live server, and a real worker
delivers a memory's change to a real receiver, signed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tenants.db import project_context
from tests.factory import make_key
from tests.memory.test_events import start_worker, stop, wait_for
from tests.webhooks.receiver import receiving, verify
from webhooks.models import Delivery


@pytest.fixture
def mem0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))
    from mem0 import MemoryClient

    yield MemoryClient


def delivered(project_id: Any) -> bool:
    with project_context(project_id):
        return Delivery.objects.filter(status=Delivery.Status.DELIVERED).exists()


def test_the_official_client_and_a_real_worker(live_api: str, mem0: Any) -> None:
    key = make_key("acme", "webhook-client")
    project_id = str(key.key.project_id)
    with receiving() as receiver, override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[receiver.host]):
        client = mem0(host=live_api, api_key=key.raw)
        created = client.create_webhook(
            url=receiver.url, name="logger", project_id=project_id, event_types=["memory_add"]
        )
        secret = created["secret"]
        assert [w["name"] for w in client.get_webhooks(project_id)] == ["logger"]
        updated = client.update_webhook(
            created["webhook_id"], name="memory logger", event_types=["memory_add", "memory_delete"]
        )
        assert updated == {"message": "Webhook updated successfully"}
        assert client.get_webhooks(project_id)[0]["event_types"] == ["memory_add", "memory_delete"]
        worker = start_worker(ENGRAM_FETCH_ALLOWED_HOSTS=receiver.host)
        try:
            added = client.add("I love green tea", user_id="alice", infer=False)["results"][0]
            assert wait_for(lambda: delivered(key.key.project_id)), worker
        finally:
            stop(worker)
        [received] = receiver.requests
        assert verify(received, secret)
        body = json.loads(received.body)
        assert body["event_details"]["id"] == added["id"]
        assert body["event_details"]["data"] == {"memory": "I love green tea"}
        assert client.delete_webhook(created["webhook_id"]) == {
            "message": "Webhook deleted successfully"
        }
        assert client.get_webhooks(project_id) == []
        client.client.close()
