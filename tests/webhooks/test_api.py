"""The webhook endpoints: the Platform's shapes, the key's own project only, strict bodies,
the key's role, and the cap held against concurrent creates."""

from __future__ import annotations

import threading
import time
from typing import Any
from unittest import mock

import httpx
from django.contrib.auth.models import User
from django.test import override_settings

from tenants.actions import NewApiKey, do_revoke_api_key
from tenants.db import project_context
from tenants.models import Membership
from tests.base import BaseTestCase
from tests.factory import add_texts, make_key
from webhooks import actions
from webhooks.models import Delivery, Webhook

RECEIVER = "127.0.0.1:8765"
URL = f"http://{RECEIVER}/hook"


@override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[RECEIVER])
class WebhookApiTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.pid = self.alice.key.project_id
        self.base = f"/api/v1/webhooks/projects/{self.pid}/"

    def create(self, who: NewApiKey | None = None, **body: Any) -> Any:
        return self.call(
            "post",
            self.base,
            {"name": "logger", "url": URL, "event_types": ["memory_add"], **body},
            who=who,
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

    # -- the key's role (its creator's in the organization, as for the project's settings) --

    def key_of(self, name: str, role: str) -> NewApiKey:
        """A key made by a member of Alice's organization with `role`."""
        user = User.objects.create_user(name, email=f"{name}@example.com")
        organization = self.alice.key.project.organization
        Membership.objects.create(organization=organization, user=user, role=role)
        return make_key("acme", "main", created_by=user)

    def test_a_readers_key_lists_webhooks_but_does_not_change_them(self) -> None:
        reader = self.key_of("rita", "reader")
        refused = self.create(who=reader)
        assert refused.status_code == 403, refused.json()
        assert "owner or admin" in refused.json()["detail"].lower()
        assert "secret" not in refused.json()
        made = self.create().json()
        path = f"/api/v1/webhooks/{made['webhook_id']}/"
        assert self.call("put", path, {"is_active": False}, who=reader).status_code == 403
        assert self.call("put", path, {"url": URL}, who=reader).status_code == 403
        assert self.call("delete", path, who=reader).status_code == 403
        [listed] = self.call("get", self.base, who=reader).json()
        assert (listed["is_active"], "secret" in listed) == (True, False)
        Membership.objects.filter(user__username="rita").update(role="admin")
        assert self.create(who=reader).status_code == 201

    def test_a_reader_learns_nothing_of_an_address(self) -> None:
        refused = self.create(url="http://10.1.2.3/hook", who=self.key_of("rita", "reader"))
        assert refused.status_code == 403
        assert "10.1.2.3" not in refused.json()["detail"]

    def test_revoking_its_key_disables_the_webhook_it_made(self) -> None:
        bob = self.key_of("bob", "admin")
        theirs = self.create(who=bob).json()["webhook_id"]
        mine = self.create(name="mine").json()["webhook_id"]
        do_revoke_api_key(bob.key)
        found = {w["webhook_id"]: w for w in self.call("get", self.base).json()}
        assert found[theirs]["is_active"] is False
        assert found[theirs]["disabled_reason"] == (
            f"the API key {bob.key.name} ({bob.key.prefix}…) that created it was revoked"
        )
        assert (found[mine]["is_active"], found[mine]["disabled_reason"]) == (True, None)
        add_texts(self.alice.key.project, ["Alice likes green tea"], user_id="alice")
        with project_context(self.pid):
            assert set(Delivery.objects.values_list("webhook_id", flat=True)) == {mine}
        path = f"/api/v1/webhooks/{theirs}/"
        assert self.call("put", path, {"is_active": True}).status_code == 200
        with project_context(self.pid):
            assert Webhook.objects.get(pk=theirs).enabled


# Each create waits for the one before (the lock): 5 x 0.2 s stays under the lock timeout.
CONCURRENT = 5


def test_the_cap_holds_against_concurrent_creates(live_api: str, settings: Any) -> None:
    """Creates at once, one place left: exactly one gets it (a slow secret widens the race)."""
    settings.ENGRAM_FETCH_ALLOWED_HOSTS = [RECEIVER]
    new = make_key("acme", "cap")
    pid = new.key.project_id
    for i in range(actions.MAX_WEBHOOKS_PER_PROJECT - 1):
        actions.do_create_webhook(pid, name=f"hook {i}", url=URL, event_types=["memory_add"])
    secret = actions.new_secret

    def slow_secret() -> str:
        time.sleep(0.2)  # between the count and the insert
        return secret()

    url = f"{live_api}/api/v1/webhooks/projects/{pid}/"
    body = {"name": "one more", "url": URL, "event_types": ["memory_add"]}
    headers = {"Authorization": f"Token {new.raw}"}
    statuses: list[int] = []

    def create() -> None:
        statuses.append(httpx.post(url, json=body, headers=headers, timeout=30).status_code)

    with mock.patch.object(actions, "new_secret", slow_secret):
        threads = [threading.Thread(target=create) for _ in range(CONCURRENT)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert sorted(statuses) == [201] + [400] * (CONCURRENT - 1)
    with project_context(pid):
        assert Webhook.objects.count() == actions.MAX_WEBHOOKS_PER_PROJECT
