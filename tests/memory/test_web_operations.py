"""The operator dashboard's operations pages (memory/web/operations.py): add requests and model
usage, API keys (create once, revoke, roles) and the scope's graph picture, through the Django
test client against the real database and AGE graph."""

from __future__ import annotations

import math
import re
import uuid
from datetime import UTC, timedelta
from typing import Any, ClassVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from memory import actions, graph
from memory.graph import Scope
from memory.models import Memory, MemoryEvent, UsageDay
from memory.templatetags.controls import visible_controls
from memory.web import graph_picture
from memory.web.operations import NEW_KEYS
from tenants.db import project_context
from tenants.models import ApiKey, Membership
from tests.base import BaseTestCase
from tests.factory import auth, make_key, make_memory

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def member(name: str, organization: Any, role: str) -> User:
    user = get_user_model().objects.create_user(name, password="pw")
    Membership.objects.create(user=user, organization=organization, role=role)
    return user


class OperationsTestCase(BaseTestCase):
    """Olivia owns Alice's organization, Rita only reads it; Oscar owns Charlie's."""

    olivia: ClassVar[User]
    rita: ClassVar[User]
    oscar: ClassVar[User]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        organization = cls.alice.key.project.organization
        cls.olivia = member("olivia", organization, Membership.Role.OWNER)
        cls.rita = member("rita", organization, Membership.Role.READER)
        cls.oscar = member("oscar", cls.charlie.key.project.organization, Membership.Role.OWNER)

    @property
    def project_id(self) -> uuid.UUID:
        return self.alice.key.project_id

    def url(self, name: str, **kwargs: Any) -> str:
        return reverse(f"web:{name}", kwargs={"project_id": self.project_id, **kwargs})

    def get(self, user: User | None, name: str, params: Any = None, **kwargs: Any) -> Any:
        if user is not None:
            self.client.force_login(user)
        return self.client.get(self.url(name, **kwargs), params)

    def post(self, user: User, name: str, data: Any = None, **kwargs: Any) -> Any:
        self.client.force_login(user)
        return self.client.post(self.url(name, **kwargs), data or {})

    def make_event(self, days_ago: int = 0, project: Any = None, **fields: Any) -> MemoryEvent:
        project = project or self.alice.key.project
        fields.setdefault("payload", {"messages": [{"role": "user", "content": "hi"}]})
        fields.setdefault("user_id", "alice")
        with project_context(project.pk):
            event = MemoryEvent.objects.create(project=project, **fields)
            moment = timezone.now() - timedelta(days=days_ago)
            MemoryEvent.objects.filter(pk=event.pk).update(created_at=moment)
        return event

    def api_status(self, raw_key: str) -> int:
        return int(self.client.get("/v1/events/", headers=auth(raw_key)).status_code)


class AccessTestCase(OperationsTestCase):
    def test_it_requires_login(self) -> None:
        for name in ("events", "keys", "graph"):
            response = self.get(None, name)
            assert response.status_code == 302
            assert response["Location"].startswith(reverse("web:login"))

    def test_it_validates_ownership(self) -> None:
        event = self.make_event()
        key = self.alice.key
        for name, kwargs in [
            ("events", {}),
            ("keys", {}),
            ("graph", {}),
            ("event", {"event_id": event.pk}),
            ("key_revoke", {"key_id": key.pk}),
        ]:
            assert self.get(self.oscar, name, **kwargs).status_code == 404, name
        assert self.post(self.oscar, "key_revoke", key_id=key.pk).status_code == 404
        assert self.post(self.oscar, "key_create", {"name": "x"}).status_code == 404
        assert ApiKey.objects.get(pk=key.pk).revoked_at is None
        assert ApiKey.objects.filter(project_id=self.project_id).count() == 1

    def test_another_projects_event_and_key_answer_404(self) -> None:
        theirs = self.make_event(project=self.charlie.key.project)
        assert self.get(self.olivia, "event", event_id=theirs.pk).status_code == 404
        their_key = self.charlie.key.pk
        assert self.get(self.olivia, "key_revoke", key_id=their_key).status_code == 404
        assert self.post(self.olivia, "key_revoke", key_id=their_key).status_code == 404
        assert ApiKey.objects.get(pk=their_key).revoked_at is None


class KeysTestCase(OperationsTestCase):
    def test_it_lists_the_projects_keys_only(self) -> None:
        response = self.get(self.rita, "keys")
        assert response.status_code == 200
        assert [k.name for k in response.context["keys"]] == ["alice's key"]
        assert self.alice.key.prefix.encode() in response.content
        assert self.charlie.key.prefix.encode() not in response.content

    def test_it_pins_the_keys_page_queries(self) -> None:
        self.client.force_login(self.rita)
        self.client.get(self.url("keys"))  # the connection then knows its tenant setting
        # 1 session, 2 user, 3 project, 4 role; in the tenant transaction: 5 savepoint,
        # 6 project setting, 7 switcher's projects, 8 the keys with their creators (read by
        # the template), 9 setting cleared, 10 release.
        with self.assertNumQueries(10):
            assert self.client.get(self.url("keys")).status_code == 200

    def test_a_reader_sees_keys_but_cannot_create_or_revoke(self) -> None:
        page = self.get(self.rita, "keys")
        assert b"Create key" not in page.content and b"Revoke" not in page.content
        assert self.post(self.rita, "key_create", {"name": "sneaky"}).status_code == 403
        key = self.alice.key
        assert self.get(self.rita, "key_revoke", key_id=key.pk).status_code == 403
        assert self.post(self.rita, "key_revoke", key_id=key.pk).status_code == 403
        assert ApiKey.objects.filter(project_id=self.project_id).count() == 1
        assert ApiKey.objects.get(pk=key.pk).revoked_at is None
        assert self.api_status(self.alice.raw) == 200

    def test_it_creates_a_key_shown_once_that_authenticates(self) -> None:
        # Post/redirect/get: the POST creates the key and redirects; the GET shows it once.
        created = self.post(self.olivia, "key_create", {"name": "chat app"})
        assert created.status_code == 303 and created["Location"] == self.url("keys")
        key = ApiKey.objects.get(project_id=self.project_id, name="chat app")
        assert key.prefix.encode() not in created.content
        shown = self.client.get(self.url("keys"))
        assert shown.status_code == 200
        assert shown["Cache-Control"] == "no-store"
        [new] = shown.context["new_keys"]
        raw = new["raw"]
        assert raw.encode() in shown.content and new["name"] == "chat app"
        assert key.created_by == self.olivia and key.matches(raw)
        assert raw not in key.key_hash
        assert self.api_status(raw) == 200
        # A reload shows the key's row, never its secret again, and creates nothing.
        again = self.get(self.olivia, "keys")
        assert raw.encode() not in again.content and not again.context["new_keys"]
        assert "no-store" not in again.get("Cache-Control", "")
        assert key.prefix.encode() in again.content and b"olivia" in again.content
        assert ApiKey.objects.filter(project_id=self.project_id).count() == 2
        assert NEW_KEYS not in self.client.session

    def test_a_new_key_is_shown_on_its_own_projects_page_only(self) -> None:
        other = make_key("acme", "second").key.project
        self.post(self.olivia, "key_create", {"name": "first"})
        self.post(self.olivia, "key_create", {"name": "second"})
        elsewhere = self.client.get(reverse("web:keys", kwargs={"project_id": other.pk}))
        assert elsewhere.context["new_keys"] == []
        shown = self.client.get(self.url("keys"))
        assert [k["name"] for k in shown.context["new_keys"]] == ["first", "second"]
        assert not self.client.get(self.url("keys")).context["new_keys"]

    def test_a_key_name_is_isolated_from_the_text_around_it(self) -> None:
        name = "\u202egnp.exe"
        self.post(self.olivia, "key_create", {"name": name})
        page = self.client.get(self.url("keys")).content.decode()
        shown = visible_controls(name)  # the override as a visible marker
        assert f'<h2 id="new-key-title-1">New key “<bdi>{shown}</bdi>”</h2>' in page
        assert f"<td><bdi>{shown}</bdi></td>" in page
        key = ApiKey.objects.get(name=name)
        revoke = self.client.get(self.url("key_revoke", key_id=key.pk)).content.decode()
        assert f"<title>Revoke &#x2068;{name}&#x2069; · &#x2068;main&#x2069;" in revoke
        assert f"Revoke the key “<bdi>{shown}</bdi>”?" in revoke
        done = self.client.post(self.url("key_revoke", key_id=key.pk), follow=True)
        assert f"The key <bdi>{name}</bdi> is revoked" in done.content.decode()

    def test_a_key_needs_a_name(self) -> None:
        response = self.post(self.olivia, "key_create", {"name": "  "})
        assert response.status_code == 400
        assert ApiKey.objects.filter(project_id=self.project_id).count() == 1

    def test_revoking_a_key_asks_first_and_stops_it_authenticating(self) -> None:
        self.post(self.olivia, "key_create", {"name": "doomed"})
        raw = self.client.get(self.url("keys")).context["new_keys"][0]["raw"]
        created = ApiKey.objects.get(project_id=self.project_id, name="doomed")
        assert self.api_status(raw) == 200
        confirm = self.get(self.olivia, "key_revoke", key_id=created.pk)
        assert confirm.status_code == 200 and b"Revoke this key" in confirm.content
        assert ApiKey.objects.get(pk=created.pk).revoked_at is None  # a GET changes nothing
        response = self.post(self.olivia, "key_revoke", key_id=created.pk)
        assert response.status_code == 302 and response["Location"] == self.url("keys")
        assert ApiKey.objects.get(pk=created.pk).revoked_at is not None
        assert self.api_status(raw) == 401
        assert self.api_status(self.alice.raw) == 200  # the other key still works
        assert b"revoked" in self.get(self.olivia, "keys").content


class EventsTestCase(OperationsTestCase):
    def test_it_shows_tokens_per_event_and_sums_per_day(self) -> None:
        usage = {"calls": 2, "input_tokens": 1200, "output_tokens": 345}
        self.make_event(0, usage=usage, status="SUCCEEDED", extractor="claude")
        self.make_event(0, usage={"calls": 3, "input_tokens": 800, "output_tokens": 55})
        self.make_event(0)  # pending: no usage yet, counts as 0
        self.make_event(2, usage={"calls": 1, "input_tokens": 10, "output_tokens": 5})
        self.make_event(45, usage={"calls": 9, "input_tokens": 99999, "output_tokens": 9})
        self.make_event(0, project=self.charlie.key.project, usage=usage)
        listed = self.get(self.rita, "events")
        assert listed.context["page"].paginator.count == 5  # the list keeps every event
        assert b">1,200<" in listed.content and b">345<" in listed.content
        assert b"99,999" in listed.content  # the old event's own row, outside the 30 days
        response = self.get(self.rita, "usage")
        today, two_days_ago = timezone.localdate(), timezone.localdate() - timedelta(days=2)
        days = [(d["day"], d["events"], d["calls"], d["input_tokens"], d["output_tokens"])
                for d in response.context["days"]]  # fmt: skip
        assert days == [(today, 3, 5, 2000, 400), (two_days_ago, 1, 1, 10, 5)]
        totals = {"events": 4, "calls": 6, "input_tokens": 2010, "output_tokens": 405}
        assert response.context["totals"] == totals
        table = re.search(rb'id="usage-title".*?</table>', response.content, re.DOTALL)
        assert table is not None  # each total, grouped for reading
        footer = re.search(rb"<tfoot>.*?</tfoot>", table[0], re.DOTALL)
        assert footer is not None
        assert all(f"{v:,}".encode() in footer[0] for v in totals.values())
        assert b"99,999" not in response.content

    def test_it_shows_the_rerankers_usage_per_day(self) -> None:
        quiet = self.get(self.rita, "usage")
        assert b"Reranker usage" not in quiet.content  # no reranker, nothing counted: no table
        for reranked, tokens in ((True, 300), (False, 0), (True, 120)):
            actions.do_count_rerank(
                self.project_id, reranked=reranked, calls=1, input_tokens=tokens, output_tokens=9
            )
        actions.do_count_rerank(
            self.charlie.key.project_id, reranked=True, calls=1, input_tokens=5, output_tokens=5
        )
        response = self.get(self.rita, "usage")
        [today] = response.context["rerank_days"]
        assert today["day"] == timezone.now().astimezone(UTC).date()
        counts = {
            "searches": 3,
            "reranked": 2,
            "calls": 3,
            "input_tokens": 420,
            "output_tokens": 27,
        }
        assert {k: today[k] for k in counts} == counts  # Charlie's search is not Alice's
        assert response.context["rerank_totals"] == counts
        assert b"Reranker usage per day" in response.content and b">420<" in response.content

    def test_usage_per_day_survives_the_erasure_of_a_user(self) -> None:
        self.make_event(0, usage={"calls": 2, "input_tokens": 1200, "output_tokens": 345})
        self.make_event(
            0, user_id="bob", usage={"calls": 1, "input_tokens": 100, "output_tokens": 5}
        )
        self.make_event(2, usage={"calls": 1, "input_tokens": 10, "output_tokens": 5})
        before = self.get(self.rita, "usage").context
        days_before, totals_before = before["days"], before["totals"]
        assert totals_before == {
            "events": 3,
            "calls": 4,
            "input_tokens": 1310,
            "output_tokens": 355,
        }
        actions.do_erase_user(self.alice.key.project, "alice", actor="test")
        after = self.get(self.rita, "usage").context
        assert self.get(self.rita, "events").context["page"].paginator.count == 1  # bob's
        assert (after["days"], after["totals"]) == (days_before, totals_before)
        with project_context(self.project_id):
            folded = list(UsageDay.objects.values_list("events", "calls", "input_tokens"))
        assert sorted(folded) == [(1, 1, 10), (1, 2, 1200)]  # counts only, no user id

    def test_it_filters_events_by_status_and_user(self) -> None:
        failed = self.make_event(status="FAILED", error="model timed out", attempts=3)
        self.make_event(status="SUCCEEDED")
        bobs = self.make_event(user_id="bob")
        found = self.get(self.rita, "events", {"status": "FAILED"}).context["page"].object_list
        assert [e.pk for e in found] == [failed.pk]
        found = self.get(self.rita, "events", {"user_id": "bob"}).context["page"].object_list
        assert [e.pk for e in found] == [bobs.pk]
        assert b"model timed out" in self.get(self.rita, "events").content

    def test_it_pages_events_newest_first(self) -> None:
        made = [self.make_event(days_ago=i) for i in range(27)]
        first = self.get(self.rita, "events").context["page"]
        assert [e.pk for e in first.object_list] == [e.pk for e in made[:25]]
        second = self.get(self.rita, "events", {"page": "2"}).context["page"]
        assert [e.pk for e in second.object_list] == [e.pk for e in made[25:]]

    def test_it_pins_the_events_page_queries(self) -> None:
        self.make_event(usage={"calls": 1, "input_tokens": 1, "output_tokens": 1})
        self.client.force_login(self.rita)
        self.client.get(self.url("events"))  # the connection then knows its tenant setting
        # 1 session, 2 user, 3 project, 4 role; in the tenant transaction: 5 savepoint,
        # 6 project setting, 7 count of events, 8 count of the last 30 days' warned events,
        # 9 switcher's projects, 10 the page of events (read by the template), 11 setting
        # cleared, 12 release.
        with self.assertNumQueries(12):
            assert self.client.get(self.url("events")).status_code == 200
        with self.assertNumQueries(12):
            assert self.client.get(self.url("events"), {"user_id": "alice"}).status_code == 200

    def test_it_pins_the_usage_page_queries(self) -> None:
        self.make_event(usage={"calls": 1, "input_tokens": 1, "output_tokens": 1})
        self.client.force_login(self.rita)
        self.client.get(self.url("usage"))
        # 1 session, 2 user, 3 project, 4 role; in the tenant transaction: 5 savepoint,
        # 6 project setting, 7 usage per day and model of the events kept, 8 of those erased,
        # 9 usage per day (kept), 10 (erased), 11 the reranker's per day, 12 API calls per day,
        # 13 per endpoint (LIMIT 50), 14 usage per user (LIMIT 25), 15 per agent, 16 the
        # switcher's projects, 17 setting cleared, 18 release.
        with self.assertNumQueries(18):
            assert self.client.get(self.url("usage")).status_code == 200
        # Filtered by a user: one more, that user's usage per day (one GROUP BY, LIMIT 30).
        with self.assertNumQueries(19):
            assert self.client.get(self.url("usage"), {"user_id": "alice"}).status_code == 200

    def usage_fixture(self) -> None:
        """Alice spends most, then Bob with two agents; an agent without a user; what must not
        count: another project's alice, and alice 45 days ago."""

        def spent(calls: int, tokens_in: int, tokens_out: int) -> dict[str, int]:
            return {"calls": calls, "input_tokens": tokens_in, "output_tokens": tokens_out}

        self.make_event(0, agent_id="tutor", usage=spent(2, 1200, 345))
        self.make_event(3, agent_id="tutor", usage=spent(3, 800, 55))
        self.make_event(3)  # pending: a request with no usage yet, counted with 0 tokens
        self.make_event(1, user_id="bob", agent_id="tutor", usage=spent(1, 500, 50))
        self.make_event(0, user_id="bob", agent_id="coach", usage=spent(1, 90, 10))
        self.make_event(0, user_id=None, agent_id="cron", usage=spent(4, 40, 4))
        self.make_event(0, user_id=HOSTILE, usage=spent(1, 1, 1))
        self.make_event(45, usage=spent(9, 99999, 9))
        charlies = self.charlie.key.project
        self.make_event(0, project=charlies, agent_id="tutor", usage=spent(7, 77777, 7))

    @staticmethod
    def sums(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        keys = ("scope_id", "events", "calls", "input_tokens", "output_tokens")
        return [tuple(row[key] for key in keys) for row in rows]

    def test_it_sums_usage_per_user_and_per_agent_of_the_last_30_days(self) -> None:
        self.usage_fixture()
        response = self.get(self.rita, "usage")
        assert self.sums(response.context["users"]) == [
            ("alice", 3, 5, 2000, 400),  # not the 45-day-old request, nor charlie's project's
            ("bob", 2, 2, 590, 60),
            (HOSTILE, 1, 1, 1, 1),
        ]  # the request without a user id is in no row
        assert self.sums(response.context["agents"]) == [
            ("tutor", 3, 6, 2500, 450),
            ("coach", 1, 1, 90, 10),
            ("cron", 1, 4, 40, 4),
        ]
        content = response.content.decode()
        usage_url, events_url = self.url("usage"), self.url("events")
        for url, field, value in (
            (usage_url, "user_id", "alice"),
            (usage_url, "user_id", "bob"),
            (events_url, "agent_id", "tutor"),
        ):
            link = f'<a href="{url}?{field}={value}"><code><bdi>{value}</bdi></code></a>'
            assert link in content
        hostile = "%3Cscript%3Ealert%281%29%3C%2Fscript%3E"
        assert f'?user_id={hostile}"><code><bdi>{ESCAPED}</bdi></code></a>' in content
        assert HOSTILE not in content
        # Numbers for reading (alice's 2,000 input tokens), in their own table.
        users = re.search(r'id="usage-users-title".*?</table>', content, re.DOTALL)
        assert users is not None and '<td class="num">2,000</td>' in users[0]
        assert "77777" not in content and "77,777" not in content  # charlie's project's

    def test_a_users_events_show_their_usage_per_day(self) -> None:
        self.usage_fixture()
        response = self.get(self.rita, "usage", {"user_id": "alice"})
        three_days_ago = timezone.localdate() - timedelta(days=3)
        days = [(d["day"], d["events"], d["calls"], d["input_tokens"], d["output_tokens"])
                for d in response.context["user_days"]]  # fmt: skip
        assert days == [(timezone.localdate(), 1, 2, 1200, 345), (three_days_ago, 2, 3, 800, 55)]
        assert response.context["user_totals"] == {
            "events": 3, "calls": 5, "input_tokens": 2000, "output_tokens": 400,
        }  # fmt: skip
        content = response.content.decode()
        assert "Model usage of user <code><bdi>alice</bdi></code> per day" in content
        assert '<td class="num">1,200</td>' in content
        assert f'href="{self.url("events")}?user_id=alice">This user' in content
        # Unfiltered, no such table; filtered by a user without requests, an empty one.
        unfiltered = self.get(self.rita, "usage")
        assert unfiltered.context["user_days"] == []
        assert b"Model usage of user" not in unfiltered.content
        response = self.get(self.rita, "usage", {"user_id": "nobody"})
        assert response.context["user_days"] == []
        assert b"No add requests of this user kept" in response.content
        # The agent's filter, which its usage row links to.
        found = self.get(self.rita, "events", {"agent_id": "coach"}).context["page"].object_list
        assert [(e.user_id, e.agent_id) for e in found] == [("bob", "coach")]

    def test_the_project_page_lists_the_top_five_spenders(self) -> None:
        self.usage_fixture()
        for n in range(4):  # 7 users in all: the 5 with the most tokens are listed
            usage = {"calls": 1, "input_tokens": 100 * (n + 1), "output_tokens": 0}
            self.make_event(2, user_id=f"user-{n}", usage=usage)
        response = self.get(self.rita, "project")
        assert self.sums(response.context["spenders"]) == [
            ("alice", 3, 5, 2000, 400),
            ("bob", 2, 2, 590, 60),
            ("user-3", 1, 1, 400, 0),
            ("user-2", 1, 1, 300, 0),
            ("user-1", 1, 1, 200, 0),
        ]
        content = response.content.decode()
        assert "Top spenders, last 30 days" in content
        usage_url = self.url("usage")
        assert f'<a href="{usage_url}?user_id=alice"><code><bdi>alice</bdi></code></a>' in content
        assert '<td class="num">2,000</td>' in content
        assert "user-0" not in content and "77,777" not in content
        # In another project, none of these.
        self.client.force_login(self.oscar)
        other = reverse("web:project", kwargs={"project_id": self.charlie.key.project_id})
        [charlies] = self.client.get(other).context["spenders"]
        assert (charlies["scope_id"], charlies["input_tokens"]) == ("alice", 77777)

    def test_the_event_page_shows_the_request_escaped_and_links_its_memories(self) -> None:
        with project_context(self.project_id):
            memory = make_memory(self.project_id, "User likes tea")
        payload = {"messages": [{"role": "user", "content": f"I like tea {HOSTILE}"}]}
        results = [{"id": str(memory.pk), "memory": memory.text, "event": "ADD"}]
        graph_summary = {
            "status": "SUCCEEDED",
            "entities": [{"name": "tea", "type": "food"}],
            "added": [{"id": 1, "source": "alice", "relationship": "likes", "destination": "tea"}],
            "invalidated": [
                {"id": 2, "source": "alice", "relationship": "likes", "destination": HOSTILE}
            ],
        }
        usage = {"calls": 4, "input_tokens": 4321, "output_tokens": 123}
        event = self.make_event(
            payload=payload, results=results, graph=graph_summary, usage=usage,
            status="SUCCEEDED", extractor="claude", attempts=1, error=f"partly {HOSTILE}",
        )  # fmt: skip
        response = self.get(self.rita, "event", event_id=event.pk)
        assert response.status_code == 200
        assert HOSTILE.encode() not in response.content
        assert response.content.count(ESCAPED.encode()) == 3  # message, error, graph
        memory_url = reverse(
            "web:memory", kwargs={"project_id": self.project_id, "memory_id": memory.pk}
        )
        assert f'href="{memory_url}"'.encode() in response.content
        for text in (b"4321 input tokens", b"SUCCEEDED", b"claude", b"<del><bdi>alice</bdi>"):
            assert text in response.content

    def test_an_event_with_an_erased_payload_still_renders(self) -> None:
        event = self.make_event(payload={}, results=[{"event": "ADD"}, "junk"])
        response = self.get(self.rita, "event", event_id=event.pk)
        assert response.status_code == 200 and b"No messages kept" in response.content


class GraphTestCase(OperationsTestCase):
    memories: ClassVar[dict[str, Memory]]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        project, alice = cls.alice.key.project_id, Scope(user_id="alice")
        with project_context(project):
            cls.memories = {
                "tea": make_memory(project, "Alice likes tea"),
                "acme": make_memory(project, "Alice works at Acme"),
            }
        graph.upsert_relation(
            project, "Alice", "likes", "Tea", alice, memory_id=cls.memories["tea"].pk
        )
        graph.upsert_relation(
            project, "Alice", "works at", "Acme", alice, memory_id=cls.memories["acme"].pk
        )
        graph.upsert_relation(project, "Alice", "knows", HOSTILE, alice)
        graph.upsert_relation(project, "Alice", "likes", "Java", alice)
        graph.invalidate_relations(project, alice, source="alice", destination="java")
        graph.upsert_relation(project, "Bob", "likes", "Coffee", Scope(user_id="bob"))
        graph.upsert_relation(
            cls.charlie.key.project_id, "Alice", "knows", "Charlie's secret", alice
        )

    def test_it_draws_the_scopes_valid_relations_as_svg_and_a_table(self) -> None:
        response = self.get(self.rita, "graph", {"user_id": "alice"})
        assert response.status_code == 200
        svg = re.search(rb"<svg.*?</svg>", response.content, re.DOTALL)
        assert svg is not None
        assert b'aria-labelledby="graph-title graph-desc"' in svg[0]
        # Display names (capitals kept), isolated (U+2068 ... U+2069).
        for name in (b"Alice", b"Tea", b"Acme"):
            assert b">&#x2068;" + name + b"&#x2069;<" in svg[0], name
        # The label is shortened; the title has the whole name, isolated.
        title = f">&#x2068;{ESCAPED}&#x2069; (1 relation)</title>"
        assert title.encode() in svg[0]
        assert HOSTILE.encode() not in response.content
        assert b"java" not in response.content.lower()  # ended: not asked for
        assert b"coffee" not in response.content and b"secret" not in response.content
        rows = [
            (r["relation"].source, r["relation"].relationship, r["relation"].destination)
            for r in response.context["rows"]
        ]
        assert rows == [
            ("alice", "likes", "tea"),
            ("alice", "works_at", "acme"),
            ("alice", "knows", HOSTILE.lower()),
        ]
        assert [(r["source"], r["destination"]) for r in response.context["rows"]] == [
            ("Alice", "Tea"),
            ("Alice", "Acme"),
            ("Alice", HOSTILE),
        ]
        # Each relation's memories by their text, linked to the memory's page.
        tea_url = reverse(
            "web:memory",
            kwargs={"project_id": self.project_id, "memory_id": self.memories["tea"].pk},
        )
        link = f'<a href="{tea_url}"><bdi>Alice likes tea</bdi></a>'
        assert link.encode() in response.content
        assert b"memory 1" not in response.content
        # Each node links to the page focused on it.
        focus = self.url("graph") + "?user_id=alice&amp;entity=acme"
        assert f'href="{focus}"'.encode() in svg[0]

    def test_the_page_reads_names_and_memory_texts_in_one_query_each(self) -> None:
        self.client.force_login(self.rita)
        self.client.get(self.url("graph"), {"user_id": "alice"})  # warm up (session, graph)
        with CaptureQueriesContext(connection) as queries:
            response = self.client.get(self.url("graph"), {"user_id": "alice"})
        assert response.status_code == 200
        sql = [q["sql"] for q in queries.captured_queries]
        assert sum('"memory_memory"' in q and '"memory_memory"."text"' in q for q in sql) == 1
        assert sum("agtype_out(n.properties)" in q for q in sql) == 1

    def test_focused_on_an_entity_it_shows_its_relations_both_ways(self) -> None:
        project, alice = self.project_id, Scope(user_id="alice")
        graph.upsert_relation(project, "Dana", "employs", "Alice", alice)
        response = self.get(self.rita, "graph", {"user_id": "alice", "entity": "ACME"})
        assert response.status_code == 200
        assert response.context["focus"] == "acme"
        assert [(r["source"], r["destination"]) for r in response.context["rows"]] == [
            ("Alice", "Acme")
        ]
        assert b"<h1>Graph: <bdi>Acme</bdi></h1>" in response.content
        assert b"Alice works at Acme" in response.content
        picture = response.context["picture"]
        assert [(n.name, n.focus) for n in picture.nodes] == [("acme", True), ("alice", False)]
        back = self.url("graph") + "?user_id=alice"
        assert f'<a href="{back}">← The whole scope</a>'.encode() in response.content
        # Both directions: Alice is the source of four and the destination of one.
        response = self.get(self.rita, "graph", {"user_id": "alice", "entity": "alice"})
        pairs = {(r["source"], r["destination"]) for r in response.context["rows"]}
        assert ("Dana", "Alice") in pairs and ("Alice", "Tea") in pairs and len(pairs) == 4
        # An entity the scope does not have, or a blank one.
        response = self.get(self.rita, "graph", {"user_id": "alice", "entity": "nobody"})
        assert (
            response.status_code == 200 and b"No relation of <bdi>nobody</bdi>" in response.content
        )
        response = self.get(self.rita, "graph", {"user_id": "alice", "entity": "   "})
        assert response.status_code == 200 and response.context["focus"] == ""

    def test_ended_relations_are_shown_when_asked(self) -> None:
        response = self.get(self.rita, "graph", {"user_id": "alice", "ended": "on"})
        assert response.status_code == 200
        java = [r for r in response.context["rows"] if r["relation"].destination == "java"]
        assert len(java) == 1 and java[0]["until"] is not None and java[0]["destination"] == "Java"
        assert b'<tr class="relation-ended">' in response.content
        assert b'<th scope="col">Until</th>' in response.content
        edges = [e for e in response.context["picture"].edges if e.destination == "java"]
        assert len(edges) == 1 and edges[0].ended
        assert b'class="graph-edge graph-edge-ended"' in response.content
        # The nodes' links keep the choice.
        assert b"?user_id=alice&amp;ended=on&amp;entity=java" in response.content

    def test_an_empty_scope_or_graph_says_so(self) -> None:
        response = self.get(self.rita, "graph", {"user_id": "nobody"})
        assert response.status_code == 200
        assert b"No relations in this scope yet" in response.content
        assert b"<svg" not in response.content
        fresh = make_key("initech", "main").key.project  # its graph was never made
        member("ida", fresh.organization, Membership.Role.READER)
        self.client.force_login(get_user_model().objects.get(username="ida"))
        empty = self.client.get(
            reverse("web:graph", kwargs={"project_id": fresh.pk}), {"user_id": "ida"}
        )
        assert empty.status_code == 200 and b"No relations in this scope yet" in empty.content

    def test_without_a_scope_it_offers_the_users(self) -> None:
        with project_context(self.project_id):
            make_memory(self.project_id, "Bob drinks coffee", user_id="bob")
        response = self.get(self.rita, "graph")
        assert response.status_code == 200 and b"<svg" not in response.content
        assert b"?user_id=alice" in response.content and b"?user_id=bob" in response.content

    def test_hostile_get_parameters_never_fail(self) -> None:
        event = self.make_event()
        hostile: list[dict[str, Any]] = [
            {"user_id": "*"},
            {"user_id": "a\x00b"},
            {"user_id": "x" * 10_000},
            {"user_id": "alice", "agent_id": "$$ }) DETACH DELETE n //"},
            {"user_id": "alice", "page": "-1"},
            {"user_id": "alice", "page": "99999"},
            {"user_id": "alice", "page": "abc"},
            {"status": HOSTILE, "user_id": "' OR 1=1 --"},
            {"status": "FAILED", "page": "0"},
            {"page": "1e9"},
            {"user_id": ["alice", "bob"]},
        ]
        for params in hostile:
            for name, kwargs in (("graph", {}), ("events", {}), ("event", {"event_id": event.pk})):
                response = self.get(self.rita, name, params, **kwargs)
                # 400 only for a NUL: config.inputs refuses it before any view.
                expected = 400 if any("\x00" in str(v) for v in params.values()) else 200
                assert response.status_code == expected, (name, params)
                assert HOSTILE.encode() not in response.content

    def test_the_picture_caps_nodes_by_degree_and_is_deterministic(self) -> None:
        hub = [self.relation("hub", f"spoke {i:02}") for i in range(70)]
        pair = [self.relation("spoke 00", "spoke 01")]
        picture = graph_picture.picture(hub + pair, max_nodes=60)
        assert picture.capped and picture.entities == 71 and len(picture.nodes) == 60
        assert [n.name for n in picture.nodes[:3]] == ["hub", "spoke 00", "spoke 01"]
        assert picture == graph_picture.picture(hub + pair, max_nodes=60)
        for node in picture.nodes:
            assert 0 <= float(node.x) <= picture.width and 0 <= float(node.y) <= picture.height

    def test_the_pictures_labels_do_not_overlap_and_keep_capitals(self) -> None:
        names = {f"person {i:02}": f"Person {i:02} of Lisbon" for i in range(30)}
        rels = [self.relation(f"person {i:02}", f"person {(i * 7 + 3) % 30:02}") for i in range(30)]
        rels += [self.relation("person 00", f"person {i:02}") for i in range(1, 12)]
        rels.append(self.relation("person 01", "person 02", valid=False))
        picture = graph_picture.picture(rels, names=names, focus="person 05")
        assert picture == graph_picture.picture(rels, names=names, focus="person 05")
        assert picture.nodes[0].name == "person 05" and picture.nodes[0].focus
        assert picture.focus == "person 05" and picture.width <= graph_picture.MAX_WIDTH
        assert {n.display for n in picture.nodes} == set(names.values())
        boxes = [
            graph_picture._text_box(
                float(n.label_x),
                float(n.label_y) - graph_picture.NODE_FONT * 0.35,
                n.label,
                graph_picture.NODE_FONT,
                graph_picture.NODE_CHAR,
            )
            for n in picture.nodes
        ] + [
            graph_picture._text_box(
                float(e.label_x),
                float(e.label_y) - graph_picture.EDGE_FONT * 0.35,
                e.label,
                graph_picture.EDGE_FONT,
                graph_picture.EDGE_CHAR,
            )
            for e in picture.edges
            if e.label
        ]
        overlaps = [
            (a, b)
            for i, a in enumerate(boxes)
            for b in boxes[i + 1 :]
            if graph_picture._overlap(a, b)
        ]
        assert not overlaps
        for box in boxes:
            assert (
                box[0] >= 0 and box[2] <= picture.width and box[1] >= 0 and box[3] <= picture.height
            )
        assert sum(bool(e.label) for e in picture.edges) >= len(picture.edges) * 0.6
        # A node at least SEPARATION from any other.
        points = [(float(n.x), float(n.y)) for n in picture.nodes]
        closest = min(math.dist(a, b) for i, a in enumerate(points) for b in points[i + 1 :])
        assert closest >= graph_picture.SEPARATION - 1
        # The ended relation: its own arrow, marked.
        [ended] = [
            e for e in picture.edges if (e.source, e.destination) == ("person 01", "person 02")
        ]
        assert ended.ended and "(ended)" in ended.title

    @staticmethod
    def relation(source: str, destination: str, *, valid: bool = True) -> graph.Relation:
        return graph.Relation(
            id=0, source=source, relationship="links", destination=destination, valid=valid,
            created_at="", invalidated_at=None, memory_ids=[], event_id=None,
            scope={"user_id": "u"}, source_id=0, destination_id=0,
        )  # fmt: skip
