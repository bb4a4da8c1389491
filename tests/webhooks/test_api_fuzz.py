"""Generated hostile requests at the webhook endpoints (hypothesis), as tests/memory's fuzz:
every answer is below 500 with a JSON `detail` when refused, a refused request changes no
webhook, and every request leaves one access-log row."""

from __future__ import annotations

from typing import Any, ClassVar

from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from audit.models import AccessLog
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import auth
from tests.memory.test_api_fuzz import encode, hostile_text, json_values, raw_bodies
from webhooks import actions
from webhooks.models import Webhook

RECEIVER = "127.0.0.1:8765"
KEYS = ["name", "url", "event_types", "is_active", "org_id", "project_id", "secret", "x"]
URLS = st.sampled_from([
    f"http://{RECEIVER}/hook", "http://127.0.0.1/hook", "http://10.0.0.1/", "ftp://x/",
    "http://[::1]/", "http://169.254.169.254/", "https://93.184.215.14/h", "http://a b/",
    "http://\x00/", "http://x" + "y" * 3000 + "/", "javascript:alert(1)", "http://0/",
    "http://[::ffff:127.0.0.1]/", "http://2130706433/", "http://127.1/",
])  # fmt: skip
webhook_bodies = st.one_of(
    st.fixed_dictionaries(
        {"name": hostile_text, "url": URLS, "event_types": st.lists(hostile_text, max_size=3)}
    ),
    st.dictionaries(st.sampled_from(KEYS), st.one_of(URLS, json_values), max_size=5),
).map(encode)


@override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[RECEIVER])
class HostileWebhookRequestsTestCase(HypothesisTestCase, BaseTestCase):
    webhook_id: ClassVar[int]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        pid = cls.alice.key.project_id
        with (
            override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[RECEIVER]),
            project_context(pid),
        ):
            cls.webhook_id = actions.do_create_webhook(
                pid, name="kept", url=f"http://{RECEIVER}/hook", event_types=["memory_add"]
            ).pk

    def state(self) -> list[tuple[Any, ...]]:
        with project_context(self.alice.key.project_id):
            return list(Webhook.objects.order_by("pk").values_list("pk", "updated_at", "url"))

    def access_rows(self) -> int:
        with project_context(self.alice.key.project_id):
            mine = AccessLog.objects.count()
        with project_context(None):
            return mine + AccessLog.objects.count()

    def check(self, method: str, path: str, body: str | None) -> None:
        before, logged = self.state(), self.access_rows()
        kwargs: dict[str, Any] = {"headers": auth(self.alice.raw)}
        if body is not None:
            kwargs.update(
                data=body.encode("utf-8", "surrogatepass"), content_type="application/json"
            )
        response = getattr(self.client, method)(path, **kwargs)
        where = f"{method.upper()} {path[:100]} {(body or '')[:200]!r}"
        assert response.status_code < 500, (where, response.content[:300])
        assert response["Content-Type"].startswith("application/json"), where
        if response.status_code >= 400:
            payload = response.json()
            assert isinstance(payload.get("detail"), str) and payload["detail"], (where, payload)
            assert self.state() == before, (where, "a refused request changed rows")
        assert self.access_rows() == logged + 1, (where, "no access-log row")

    def paths(self) -> list[tuple[str, str]]:
        project = self.alice.key.project_id
        return [
            ("post", f"/api/v1/webhooks/projects/{project}/"),
            ("put", f"/api/v1/webhooks/{self.webhook_id}/"),
        ]

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(which=st.sampled_from([0, 1]), body=st.one_of(webhook_bodies, raw_bodies()))
    def test_hostile_bodies(self, which: int, body: str) -> None:
        self.check(*self.paths()[which], body)

    @settings(max_examples=60, deadline=None)
    @given(segment=hostile_text.filter(lambda t: "/" not in t and t not in ("", ".", "..")))
    def test_hostile_path_segments(self, segment: str) -> None:
        from urllib.parse import quote

        part = quote(segment, safe="", errors="surrogatepass")
        self.check("get", f"/api/v1/webhooks/projects/{part}/", None)
