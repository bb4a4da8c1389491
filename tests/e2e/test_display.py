"""How the dashboards display what users send (issue #27), in Chromium on a desktop (1280 by 800)
and a phone (390 by 844): a new API key is shown once and a reload creates no other; a direction
override (U+202E) in an id or a name stays inside it; no operator page scrolls sideways; a
10,000-character memory keeps the other columns on screen and the end user's page short.

Each test also saves a screenshot to /tmp/disp-<what>-<viewport>.png, to look at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, ViewportSize, expect

from memory.models import Memory
from tenants import links
from tenants.actions import NewApiKey
from tenants.db import project_context
from tenants.models import ApiKey, Membership
from tests.e2e.helpers import DESKTOP, PHONE, Shots, login
from tests.factory import add_texts, make_key

pytestmark = pytest.mark.browser

VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: what follows it shows right to left
EVIL = f"{RLO}evil-rlo"  # shows as "olr-live"
FILE = f"invoice{RLO}gnp.exe"  # shows as "invoiceexe.png"
PASSWORD = "a long passphrase"
# A long memory: a long URL first (no place to break it), then prose, 10,000 characters.
LONG = (
    "Alice's travel diary: https://example.com/" + "a" * 150 + " "
    + "She keeps a travel diary of every trip she takes. " * 200
)[:10_000]  # fmt: skip
SCREENSHOTS = Path("/tmp")  # noqa: S108 (screenshots to look at, as asked in #27)

# Where the first occurrence of each needle in the element's text starts on screen (its first
# box: a needle that wraps has one a line).
BOXES = """([selector, needles]) => {
  const root = document.querySelector(selector);
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const found = {};
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const needle of needles) {
      const at = node.data.indexOf(needle);
      if (needle in found || at < 0) continue;
      const range = document.createRange();
      range.setStart(node, at);
      range.setEnd(node, at + needle.length);
      const r = range.getClientRects()[0];  // where it starts, if it wraps
      found[needle] = {top: r.top, bottom: r.bottom, left: r.left, right: r.right};
    }
  }
  return found;
}"""
WIDTHS = "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
# The elements that reach past the window's right edge (to say what scrolls).
PAST_THE_EDGE = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
  .slice(0, 5)
  .map(e => `${e.tagName.toLowerCase()}.${e.className} ${e.getBoundingClientRect().right}`)"""


def name(viewport: ViewportSize) -> str:
    return "phone" if viewport is PHONE else "desktop"


def screenshot(page: Page, shots: Shots, what: str, viewport: ViewportSize) -> None:
    shots(page, f"{what}-{name(viewport)}")
    page.screenshot(path=str(SCREENSHOTS / f"disp-{what}-{name(viewport)}.png"), full_page=True)


def reading_order(page: Page, selector: str, needles: list[str]) -> list[str]:
    """The needles in the order a reader sees them: line by line, left to right."""
    boxes: dict[str, dict[str, float]] = page.evaluate(BOXES, [selector, needles])
    assert set(boxes) == set(needles), f"not found in {selector}: {set(needles) - set(boxes)}"

    def before(a: dict[str, float], b: dict[str, float]) -> bool:
        if b["top"] >= a["bottom"] - 2:  # b starts on a later line
            return True
        return a["top"] < b["bottom"] - 2 and a["left"] < b["left"]

    seen: list[str] = []
    for needle in needles:  # an insertion sort: few needles
        at = len(seen)
        while at and not before(boxes[seen[at - 1]], boxes[needle]):
            at -= 1
        seen.insert(at, needle)
    return seen


def assert_no_sideways_scroll(page: Page, where: str) -> None:
    scroll, width = page.evaluate(WIDTHS)
    past = page.evaluate(PAST_THE_EDGE) if scroll > width else []
    assert scroll <= width, f"{where} scrolls sideways: {scroll} px in a {width} px window {past}"


def operator(project: Any, role: str = Membership.Role.ADMIN) -> None:
    olga = get_user_model().objects.create_user("olga", password=PASSWORD)
    Membership.objects.create(user=olga, organization=project.organization, role=role)


# -- 1. a new key is shown once ------------------------------------------------------------


@VIEWPORTS
def test_a_new_key_is_shown_once_and_a_reload_creates_no_other(
    page: Page, shots: Shots, viewport: ViewportSize
) -> None:
    project = make_key("acme", "main").key.project
    operator(project)
    page.set_viewport_size(viewport)
    login(page, "olga", PASSWORD)
    page.get_by_role("link", name="API keys").click()
    page.get_by_label("Name").fill("chat app")
    page.get_by_role("button", name="Create key").click()

    expect(page.get_by_role("heading", name="New key “chat app”")).to_be_visible()
    raw = page.get_by_label("Key", exact=True).input_value()
    key = ApiKey.objects.get(project=project, name="chat app")
    assert key.matches(raw)
    assert_no_sideways_scroll(page, "the keys page with a new key")
    screenshot(page, shots, "keys", viewport)

    # A reload: the key's row, never its secret again, and no second key.
    page.reload()
    expect(page.get_by_role("cell", name="chat app", exact=True)).to_be_visible()
    assert ApiKey.objects.filter(project=project).count() == 2
    expect(page.get_by_role("heading", name="New key “chat app”")).to_have_count(0)
    assert raw not in page.content()
    assert page.url.endswith(f"/dashboard/p/{project.pk}/keys/")  # redirected: a GET
    # Back then forward again: nothing is sent again either.
    page.go_back()
    page.go_forward()
    assert raw not in page.content()
    assert ApiKey.objects.filter(project=project).count() == 2
    assert_no_sideways_scroll(page, "the keys page")
    screenshot(page, shots, "keys-reloaded", viewport)


# -- 2. direction overrides stay inside their value ------------------------------------------


@VIEWPORTS
def test_a_direction_override_stays_inside_its_value(
    page: Page, shots: Shots, viewport: ViewportSize, live_api: str
) -> None:
    new = make_key("acme", "main", name=FILE)
    project = new.key.project
    with project_context(project.pk):
        [memory] = add_texts(project, [f"Sent {FILE} to Bob"], user_id=EVIL, agent_id="bot")
    operator(project)
    page.set_viewport_size(viewport)
    login(page, "olga", PASSWORD)

    # The memory's scope: "user <U+202E>evil-rlo agent bot" reads "user olr-live agent bot", not
    # "user tob tnega olr-live".
    page.goto(f"/dashboard/p/{project.pk}/memories/{memory.pk}/")
    scope = "dl.facts dd:nth-of-type(2)"
    words = ["user", "evil-rlo", "agent", "bot"]
    assert reading_order(page, scope, words) == words
    # The back link: "← Memories of user" before the id.
    words = ["← Memories of user", "evil-rlo"]
    assert reading_order(page, "main > p:first-child", words) == words
    screenshot(page, shots, "rlo-memory", viewport)

    # The list's heading, and the scope column.
    page.goto(f"/dashboard/p/{project.pk}/memories/?user_id={EVIL}&agent_id=bot")
    words = ["Memories of", "user", "evil-rlo", "agent", "bot"]
    assert reading_order(page, "main h1", words) == words
    assert reading_order(page, "td.scope-ids", words[1:]) == words[1:]
    screenshot(page, shots, "rlo-list", viewport)

    # The end user's page: "(user <U+202E>evil-rlo) by acme / main".
    token, _ = links.mint(new.key, EVIL, 600)
    page.goto(f"{live_api}/me/{token}/")
    words = ["(user", "evil-rlo", ") by", "acme"]
    assert reading_order(page, "main p.muted", words) == words
    screenshot(page, shots, "rlo-enduser", viewport)

    # A key's name, on the confirmation and in the message after revoking it (which also
    # revokes the end user's link: last).
    page.goto(f"/dashboard/p/{project.pk}/keys/{new.key.pk}/revoke/")
    words = ["Revoke the key", "invoice", "gnp.exe", "”?"]
    assert reading_order(page, "main h1", words) == words
    page.get_by_role("button", name="Revoke this key").click()
    expect(page.get_by_role("status")).to_contain_text("is revoked")
    words = ["The key", "invoice", "gnp.exe", "is revoked"]
    assert reading_order(page, ".messages", words) == words
    screenshot(page, shots, "rlo-key", viewport)


# -- 3. no operator page scrolls sideways ----------------------------------------------------


def _busy_project() -> tuple[NewApiKey, Memory]:
    """A project with a long memory, an overriding id, a long one, an event and two keys."""
    new = make_key("acme", "main", name="the chat application's production key")
    project = new.key.project
    make_key("acme", "a second project with a rather long name")
    with project_context(project.pk):
        [memory] = add_texts(project, [LONG], user_id="alice", agent_id="travel-assistant")
        add_texts(project, ["Likes tea"], user_id=EVIL, run_id="run-" + "0123456789" * 6)
    return new, memory


@VIEWPORTS
def test_no_operator_page_scrolls_sideways(
    page: Page, shots: Shots, viewport: ViewportSize
) -> None:
    new, memory = _busy_project()
    project = new.key.project
    operator(project)
    page.set_viewport_size(viewport)
    page.goto("/dashboard/login/")
    assert_no_sideways_scroll(page, "the login page")
    login(page, "olga", PASSWORD)
    base = f"/dashboard/p/{project.pk}/"
    with project_context(project.pk):
        event = memory.source_event_id
    pages = [
        "/dashboard/",
        base,
        base + "memories/?user_id=alice",
        base + "memories/?user_id=alice&q=travel+diary",
        base + f"memories/{memory.pk}/",
        base + "events/",
        base + "keys/",
        base + f"keys/{new.key.pk}/revoke/",
        base + "graph/",
        base + "graph/?user_id=alice",
    ]
    if event is not None:
        pages.append(base + f"events/{event}/")
    for url in pages:
        page.goto(url)
        assert_no_sideways_scroll(page, url)
    # The keys page after a create, the one that scrolled on a phone.
    page.goto(base + "keys/")
    page.get_by_label("Name").fill("a key with a long name for the phone")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("heading", name="New key “a key with a long name for the phone”"))
    assert_no_sideways_scroll(page, "the keys page with a new key")


# -- 4. a long memory ------------------------------------------------------------------------


def assert_fits(page: Page, table: str, where: str) -> None:
    """The table fits its box: every column on screen, none pushed off by the text."""
    width, box = page.locator(table).evaluate(
        "t => [t.scrollWidth, t.closest('.table-wrap').clientWidth]"
    )
    assert width <= box, f"{where}: the table is {width} px in a {box} px box"


@VIEWPORTS
def test_a_long_memory_keeps_every_column_on_screen(
    page: Page, shots: Shots, viewport: ViewportSize, live_api: str
) -> None:
    new, memory = _busy_project()
    project = new.key.project
    operator(project)
    page.set_viewport_size(viewport)
    login(page, "olga", PASSWORD)
    base = f"/dashboard/p/{project.pk}/"
    wide = viewport is DESKTOP

    # The list and the search: the start of the text, its length, and its page for all of it.
    for url, what in ((base + "memories/?user_id=alice", "list"),
                      (base + "memories/?user_id=alice&q=travel+diary", "search")):  # fmt: skip
        page.goto(url)
        row = page.get_by_role("row").filter(has_text="Alice's travel diary")
        if wide:  # every column on screen
            assert_fits(page, "main table", what)
            expect(row.get_by_role("cell").last).to_be_in_viewport()
        else:  # the text takes less than the screen's width; the table scrolls in its box
            text_width = row.get_by_role("cell").first.evaluate("c => c.offsetWidth")
            assert text_width < viewport["width"] * 0.8, f"{what}: the text is {text_width} px"
        assert_no_sideways_scroll(page, what)
        expect(row).to_contain_text("(10,000 characters)")
        screenshot(page, shots, f"long-{what}", viewport)

    # The memory's page has it whole; its history shows the start, and all of it on demand.
    page.goto(base + f"memories/{memory.pk}/")
    expect(page.locator("blockquote.memory-text")).to_have_text(LONG)
    history = page.get_by_role("region", name="History")
    if wide:
        assert_fits(page, "#history-h ~ .table-wrap table", "history")
    preview = history.locator(".long-text-preview")
    expect(preview).to_have_text(LONG[:299] + "…")
    history.screenshot(path=str(SCREENSHOTS / f"disp-long-history-{name(viewport)}.png"))
    history.get_by_text("Show all 10,000 characters").click()
    expect(history.locator(".long-text-full")).to_have_text(LONG)
    expect(preview).to_be_hidden()
    expect(history.get_by_text("Show less")).to_be_visible()
    if wide:
        assert_fits(page, "#history-h ~ .table-wrap table", "history, opened")
    assert_no_sideways_scroll(page, "the memory's page")
    history.locator("summary").scroll_into_view_if_needed()
    shots(page, f"long-history-open-{name(viewport)}", full_page=False)

    # The end user's page: the start of the text, all of it on demand, a page of normal height.
    token, _ = links.mint(new.key, "alice", 600)
    page.goto(f"{live_api}/me/{token}/")
    item = page.locator("ul.enduser-memories > li").filter(has_text="Alice's travel diary")
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 2 * viewport["height"], f"the end user's page is {height} px high"
    assert_no_sideways_scroll(page, "the end user's page")
    expect(item.locator(".long-text-preview")).to_have_text(LONG[:299] + "…")
    screenshot(page, shots, "long-enduser", viewport)
    item.get_by_text("Show all 10,000 characters").click()
    expect(item.locator(".long-text-full")).to_have_text(LONG)
    expect(item.locator(".long-text-preview")).to_be_hidden()
    assert_no_sideways_scroll(page, "the end user's page, opened")
