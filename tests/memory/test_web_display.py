"""How the dashboards display what users send (issue #27): every user-supplied string is
isolated, so a direction override (U+202E) in it cannot reorder the page around it; a long
memory is shortened in lists and tables, with a way to see all of it.

The isolation check parses each page: every text holding U+202E must be inside a <bdi> or an
element with a `dir` attribute (a link inside one counts), a form control (its value is its own
paragraph), an SVG <text> (its own run), or, in plain-text places (<title>, <option>), between
U+2068 FIRST STRONG ISOLATE and U+2069 POP DIRECTIONAL ISOLATE. No attribute but a form
control's value may hold one.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any, ClassVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import TestCase
from django.urls import reverse

from memory import graph
from memory.graph import Scope
from memory.models import Memory, MemoryEvent
from memory.templatetags.controls import visible_controls
from tenants import links
from tenants.actions import NewApiKey
from tenants.db import project_context
from tenants.models import Membership, Project
from tests.factory import add_texts, make_key, make_memory

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE
FSI, PDI = "\u2068", "\u2069"
MARKER = "⟪RLO⟫"  # how a page shows an override in a user's text
EVIL = f"{RLO}evil-rlo"  # shows as "olr-live"
FILE = f"invoice{RLO}gnp.exe"  # shows as "invoiceexe.png"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
# Elements whose text is laid out on its own, whatever the page around it.
OWN_RUN = {"textarea", "text"}  # a form control; an SVG <text>
PLAIN_TEXT = {"title", "option"}  # no markup inside: isolated with U+2068 ... U+2069
TRANSPARENT = {"a"}  # a link inside an isolated element


class _Isolation(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict[str, str | None]]] = []
        self.leaks: list[str] = []
        self.seen = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and RLO in value and not (name == "value" and tag in ("input", "option")):
                self.leaks.append(f"<{tag} {name}={value!r}>")
        if tag not in VOID:
            self.stack.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, -1, -1):
            if self.stack[depth][0] == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        # An override shown as its marker (memory/templatetags/controls.py) reorders nothing.
        self.seen += data.count(MARKER)
        if RLO not in data:
            return
        self.seen += data.count(RLO)
        if not self._isolated(data):
            where = " > ".join(tag for tag, _ in self.stack[-4:])
            self.leaks.append(f"{where}: {data.strip()[:60]!r}")

    def _isolated(self, data: str) -> bool:
        if not self.stack:
            return False
        tag, _ = self.stack[-1]
        if tag in OWN_RUN:
            return True
        if tag in PLAIN_TEXT:
            return all(
                FSI in data[: m.start()] and PDI in data[m.end() :] for m in re.finditer(RLO, data)
            )
        for tag, attrs in reversed(self.stack):
            if tag == "bdi" or "dir" in attrs:
                return True
            if tag not in TRANSPARENT:
                return False
        return False


def leaks(html: str) -> tuple[list[str], int]:
    """The places where an override is not isolated, and how many overrides were seen."""
    parser = _Isolation()
    parser.feed(html)
    parser.close()
    return parser.leaks, parser.seen


class IsolationCheckTestCase(TestCase):
    def test_the_check_finds_a_leak_and_accepts_isolation(self) -> None:
        assert leaks(f"<p>user <code>{EVIL}</code> agent</p>")[0]
        assert leaks(f'<a title="{EVIL}">x</a>')[0]
        assert leaks(f"<title>{EVIL} · engram</title>")[0]
        assert leaks(f"<p>user <code><bdi>{EVIL}</bdi></code></p>") == ([], 1)
        assert leaks(f'<td dir="auto"><a href="/x">{EVIL}</a></td>') == ([], 1)
        assert leaks(f"<title>&#x2068;{EVIL}&#x2069; · engram</title>") == ([], 1)
        assert leaks(f'<input value="{EVIL}"><textarea>{EVIL}</textarea>') == ([], 1)


class DisplayTestCase(TestCase):
    """A project whose every name, id and text carries a direction override."""

    key: ClassVar[NewApiKey]
    project: ClassVar[Project]
    owner: ClassVar[User]
    memory: ClassVar[Memory]
    event: ClassVar[MemoryEvent]

    @classmethod
    def setUpTestData(cls) -> None:
        cls.key = make_key(f"acme{RLO}org", f"main{RLO}project", name=FILE)
        make_key(f"acme{RLO}org", "second")  # two projects: the project list shows
        cls.project = cls.key.key.project
        cls.owner = get_user_model().objects.create_user(f"{RLO}olga", password="pw")
        Membership.objects.create(
            user=cls.owner, organization=cls.project.organization, role=Membership.Role.OWNER
        )
        scope = {"user_id": EVIL, "agent_id": f"{RLO}bot"}
        with project_context(cls.project.pk):
            cls.event = MemoryEvent.objects.create(
                project=cls.project,
                user_id=EVIL,
                payload={
                    "messages": [{"role": f"{RLO}user", "name": FILE, "content": f"{RLO}hi"}],
                    "metadata": {"file": FILE},
                },
                results=[
                    {"event": "UPDATE", "memory": f"{RLO}Likes tea", "previous_memory": FILE},
                ],
                graph={
                    "status": "SUCCEEDED",
                    "entities": [{"name": FILE, "type": f"{RLO}file"}],
                    "added": [{"source": EVIL, "relationship": f"{RLO}sent", "destination": FILE}],
                    "invalidated": [{"source": EVIL, "relationship": "has", "destination": FILE}],
                },
                error=f"could not read {FILE}",
                status="FAILED",
                extractor=f"{RLO}claude",
            )
            [cls.memory] = add_texts(cls.project, [f"{RLO}Sent {FILE} to Bob"], **scope)
            Memory.objects.filter(pk=cls.memory.pk).update(
                categories=[f"{RLO}files"],
                metadata={"file": FILE},
                role=f"{RLO}user",
                actor_id=f"{RLO}bob",
                source_event_id=cls.event.pk,
            )
        graph.upsert_relation(
            cls.project.pk, EVIL, "sent", FILE, Scope(**scope), memory_id=cls.memory.pk
        )

    def operator_url(self, name: str, **kwargs: Any) -> str:
        return reverse(f"web:{name}", kwargs={"project_id": self.project.pk, **kwargs})

    def assert_isolated(self, response: Any) -> None:
        assert response.status_code == 200, response.content[:300]
        found, seen = leaks(response.content.decode())
        assert seen, "the page shows no override at all"
        assert found == [], "\n".join(found)

    def test_every_operator_page_isolates_user_strings(self) -> None:
        self.client.force_login(self.owner)
        self.client.post(self.operator_url("key_create"), {"name": FILE})  # shown on the GET
        pages = [
            reverse("web:home"),
            self.operator_url("project"),
            self.operator_url("project") + f"?find={RLO}",
            self.operator_url("memories") + f"?user_id={EVIL}&category={RLO}files",
            self.operator_url("memories") + f"?user_id={EVIL}&q={RLO}Sent+invoice+to+Bob",
            self.operator_url("memory", memory_id=self.memory.pk),
            self.operator_url("events"),
            self.operator_url("event", event_id=self.event.pk),
            self.operator_url("keys"),
            self.operator_url("key_revoke", key_id=self.key.key.pk),
            self.operator_url("graph"),
            self.operator_url("graph") + f"?user_id={EVIL}&agent_id={RLO}bot",
        ]
        for url in pages:
            with self.subTest(url=url):
                self.assert_isolated(self.client.get(url))
        drawn = self.client.get(pages[-1]).content.decode()
        assert f"<bdi>{visible_controls(FILE)}</bdi></a></td>" in drawn  # the relation, a link

    def test_every_end_user_page_isolates_user_strings(self) -> None:
        token, _ = links.mint(self.key.key, EVIL, 600)
        pages = [
            reverse("web:enduser_home", kwargs={"token": token}),
            reverse("web:enduser_home", kwargs={"token": token}) + f"?q={RLO}invoice",
            reverse("web:enduser_memory", kwargs={"token": token, "memory_id": self.memory.pk}),
        ]
        for url in pages:
            with self.subTest(url=url):
                self.assert_isolated(self.client.get(url))
        erase = self.client.get(reverse("web:enduser_erase", kwargs={"token": token}))
        assert erase.status_code == 200 and leaks(erase.content.decode())[0] == []

    def test_the_key_revoked_message_isolates_the_name(self) -> None:
        self.client.force_login(self.owner)
        url = self.operator_url("key_revoke", key_id=self.key.key.pk)
        page = self.client.post(url, follow=True)
        self.assert_isolated(page)
        assert f"The key <bdi>{FILE}</bdi> is revoked" in page.content.decode()


LONG = ("Alice keeps a travel diary of every trip she takes. " * 200)[:10_000]


class LongMemoryTestCase(TestCase):
    """A 10,000-character memory: shortened in lists and tables, whole on its own page."""

    key: ClassVar[NewApiKey]
    project: ClassVar[Project]
    owner: ClassVar[User]

    @classmethod
    def setUpTestData(cls) -> None:
        cls.key = make_key("acme", "main")
        cls.project = cls.key.key.project
        cls.owner = get_user_model().objects.create_user("olga", password="pw")
        Membership.objects.create(
            user=cls.owner, organization=cls.project.organization, role=Membership.Role.OWNER
        )

    def setUp(self) -> None:
        with project_context(self.project.pk):
            [self.long] = add_texts(self.project, [LONG], user_id="alice")
            make_memory(self.project, "Likes tea", user_id="alice")
        self.client.force_login(self.owner)

    def url(self, name: str, **kwargs: Any) -> str:
        return reverse(f"web:{name}", kwargs={"project_id": self.project.pk, **kwargs})

    def test_the_list_and_the_search_show_its_start_and_length(self) -> None:
        for params in ({"user_id": "alice"}, {"user_id": "alice", "q": "travel diary trip"}):
            with self.subTest(params=params):
                page = self.client.get(self.url("memories"), params)
                html = page.content.decode()
                assert LONG not in html and LONG[:159] + "…" in html
                assert "(10,000 characters)" in html
                memory_url = self.url("memory", memory_id=self.long.pk)
                assert f'href="{memory_url}"' in html  # its page shows all of it

    def test_its_page_shows_it_whole_and_the_history_shortened_with_all_in_details(self) -> None:
        html = self.client.get(self.url("memory", memory_id=self.long.pk)).content.decode()
        assert f'<blockquote class="memory-text" dir="auto">{LONG}</blockquote>' in html
        history = html[html.index('id="history-h"') : html.index('id="source-h"')]
        assert history.count(LONG) == 1  # once, in the <details>
        assert '<p class="long-text-preview" dir="auto">' + LONG[:299] + "…</p>" in history
        assert '<summary><span class="when-closed">Show all 10,000 characters</span>' in history
        assert f'<div class="long-text-full" dir="auto">{LONG}</div></details>' in history

    def test_the_end_user_list_shows_its_start_with_all_in_details(self) -> None:
        token, _ = links.mint(self.key.key, "alice", 600)
        html = self.client.get(reverse("web:enduser_home", kwargs={"token": token})).content
        text = html.decode()
        assert text.count(LONG) == 1  # in the <details> only
        assert LONG[:299] + "…</p>" in text and "Show all 10,000 characters" in text
        assert "<bdi>Likes tea</bdi>" in text  # a short one as it is
