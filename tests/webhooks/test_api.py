"""The webhook endpoints: the Platform's shapes, the key's own project only, strict bodies."""

from __future__ import annotations

from typing import Any

from django.test import override_settings

from tenants.db import project_context
from tests.base import BaseTestCase
from webhooks.models import Webhook

RECEIVER = "127.0.0.1:8765"
URL = f"http://{RECEIVER}/hook"


@override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[RECEIVER])
class WebhookApiTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.pid = self.alice.key.project_id
        self.base = f"/api/v1/webhooks/projects/{self.pid}/"

    def create(self, **body: Any) -> Any:
        return self.call(
            "post", self.base, {"name": "logger", "url": URL, "event_types": ["memory_add"], **body}
        )

    def test_it_creates_lists_updates_and_deletes_a_webhook(self) -> None:
        created = self.create()
        assert created.status_code == 201, created.json()
        body = created.json()
        assert body["secret"].startswith("whsec_") and len(body["secret"]) > 40
        assert (body["name"], body["url"], body["event_types"], body["is_active"]) == (
            "logger",
            URL,
            ["memory_add"],
            True,
        )
        assert (body["project"], body["project_id"]) == ("main", str(self.pid))
        listed = self.call("get", self.base).json()
        assert [w["webhook_id"] for w in listed] == [body["webhook_id"]]
        assert "secret" not in listed[0]
        path = f"/api/v1/webhooks/{body['webhook_id']}/"
        changed = self.call("put", path, {"name": "renamed", "event_types": ["memory_delete"]})
        assert changed.json() == {"message": "Webhook updated successfully"}
        [after] = self.call("get", self.base).json()
        assert (after["name"], after["event_types"]) == ("renamed", ["memory_delete"])
        assert self.call("put", path, {"is_active": False}).status_code == 200
        [paused] = self.call("get", self.base).json()
        assert (paused["is_active"], paused["disabled_reason"]) == (
            False,
            "disabled through the API",
        )
        assert self.call("delete", path).json() == {"message": "Webhook deleted successfully"}
        assert self.call("get", self.base).json() == []
        assert self.call("delete", path).status_code == 404

    def test_it_validates_ownership(self) -> None:
        webhook_id = self.create().json()["webhook_id"]
        charlie = self.charlie.key.project_id
        other = f"/api/v1/webhooks/projects/{charlie}/"
        assert self.call("get", other).status_code == 404
        body = {"name": "x", "url": URL, "event_types": ["memory_add"]}
        assert self.call("post", other, body).status_code == 404
        assert self.call("get", "/api/v1/webhooks/projects/not-a-uuid/").status_code == 404
        path = f"/api/v1/webhooks/{webhook_id}/"
        assert self.call("put", path, {"name": "mine"}, who=self.charlie).status_code == 404
        assert self.call("delete", path, who=self.charlie).status_code == 404
        assert self.call("get", other, who=self.charlie).json() == []
        with project_context(self.pid):
            assert Webhook.objects.get().name == "logger"

    def test_it_refuses_bad_bodies_and_changes_nothing(self) -> None:
        cases: list[dict[str, Any]] = [
            {"event_types": ["memory_add", "memory_explode"]},
            {"event_types": []},
            {"event_types": "memory_add"},
            {"name": ""},
            {"url": "ftp://example.com/hook"},
            {"url": "http://user:pw@127.0.0.1:8765/hook"},
            {"url": "http://10.0.0.1/hook"},
            {"url": "http://169.254.169.254/latest/meta-data/"},
            {"url": "http://127.0.0.1:9/hook"},
            {"url": "http://[::1]:8765/hook"},
            {"url": "http://0.0.0.0/hook"},
            {"colour": "blue"},
        ]
        for case in cases:
            response = self.create(**case)
            assert response.status_code == 400, (case, response.json())
            assert response.json()["detail"], case
        assert self.call("get", self.base).json() == []
        made = self.create().json()
        path = f"/api/v1/webhooks/{made['webhook_id']}/"
        for case in cases:
            assert self.call("put", path, case).status_code == 400, case
        [unchanged] = self.call("get", self.base).json()
        assert (unchanged["url"], unchanged["event_types"]) == (URL, ["memory_add"])

    def test_it_says_why_an_address_is_refused(self) -> None:
        detail = self.create(url="http://10.1.2.3/hook").json()["detail"]
        assert "10.1.2.3" in detail and "ENGRAM_FETCH_ALLOWED_HOSTS" in detail

    def test_it_refuses_multicast_addresses(self) -> None:
        for url in ("http://224.0.0.1/", "http://239.1.2.3/hook", "http://[ff02::1]/hook"):
            response = self.create(url=url)
            assert response.status_code == 400, (url, response.json())
            assert "multicast" in response.json()["detail"], url
        assert self.call("get", self.base).json() == []

    def test_it_tolerates_the_ids_older_clients_add(self) -> None:
        response = self.create(org_id="x", project_id=str(self.pid))
        assert response.status_code == 201

    def test_it_needs_a_key(self) -> None:
        assert self.client.get(self.base).status_code == 401
