"""The operator dashboard's layout (issue #50, part 3, item 10), in Chromium: a superuser's
header, who sees every organization's projects, stays one line at 1280 px; on a phone the
first memory is on the first screen, under the header and the filters; a short scope id never
breaks inside its word ("alic/e").

Each step saves a screenshot to /tmp/layout-<what>-<viewport>.png, to look at."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, ViewportSize, expect

from tenants.db import project_context
from tests.e2e.helpers import DESKTOP, PHONE, Shots, login
from tests.e2e.test_display import PASSWORD, SCREENSHOTS, assert_no_sideways_scroll, operator
from tests.factory import add_texts, make_key

pytestmark = pytest.mark.browser

LONG = "a-very-long-organization-name-of-a-customer"


def middles(page: Page, selector: str) -> list[float]:
    """The vertical middle of each element matching `selector`."""
    boxes: list[Any] = page.locator(selector).evaluate_all(
        "els => els.map(e => { const r = e.getBoundingClientRect(); return r.top + r.height / 2; })"
    )
    return [float(middle) for middle in boxes]


def test_a_superusers_header_is_one_line_at_1280(page: Page, shots: Shots) -> None:
    project = make_key(LONG, "production-assistant-memories").key.project
    for n in range(12):
        make_key(f"{LONG}-{n}", f"project-with-a-long-name-{n}")
    get_user_model().objects.create_superuser("site-reliability-admin", "sre@example.com", PASSWORD)
    page.set_viewport_size(DESKTOP)
    login(page, "site-reliability-admin", PASSWORD)
    page.goto(f"/dashboard/p/{project.pk}/memories/")
    expect(page.get_by_role("link", name="Usage")).to_be_visible()
    header = page.locator("header.top")
    found = middles(page, "header.top > *")
    rows = max(found) - min(found)
    height = header.evaluate("e => e.getBoundingClientRect().height")
    page.screenshot(path=str(SCREENSHOTS / "layout-header-desktop.png"))
    shots(page, "superuser-header", full_page=False)
    assert rows < 8 and height < 60, (found, height)  # one line, not two
    # The project's whole name is still there to read, in the list and on hover.
    switcher = page.get_by_role("combobox", name="Project")
    assert "production-assistant-memories" in switcher.inner_text()
    assert switcher.get_attribute("title")


@pytest.mark.parametrize("viewport", [PHONE], ids=["phone"])
def test_on_a_phone_the_first_memory_is_on_the_first_screen(
    page: Page, shots: Shots, viewport: ViewportSize
) -> None:
    project = make_key("acme", "main").key.project
    with project_context(project.pk):
        add_texts(project, [f"Alice fact number {n}" for n in range(5)], user_id="alice")
        add_texts(project, ["Bob likes tea"], user_id="bob")
    operator(project)
    page.set_viewport_size(viewport)
    login(page, "olga", PASSWORD)
    page.goto(f"/dashboard/p/{project.pk}/memories/?user_id=alice")
    first = page.locator("table tbody tr").first
    expect(first).to_contain_text("Alice fact")
    top = first.evaluate("e => e.getBoundingClientRect().top")
    page.screenshot(path=str(SCREENSHOTS / "layout-memories-phone.png"))
    shots(page, "memories-first-screen", full_page=False)
    assert top < viewport["height"] * 0.8, top  # on the first screen, not below the filters
    # The filters are one tap away, and open by themselves when one is in use.
    page.locator("details.filters-box > summary").click()
    expect(page.get_by_label("Agent", exact=True)).to_be_visible()
    assert_no_sideways_scroll(page, "the memories page on a phone")
    page.goto(f"/dashboard/p/{project.pk}/memories/?user_id=alice&state=all&category=x")
    expect(page.locator("details.filters-box")).to_have_attribute("open", "")
    expect(page.locator("details.filters-box > summary")).to_have_text("Filters (2 in use)")

    # A short id never breaks inside its word, on the scopes page or in the list.
    page.goto(f"/dashboard/p/{project.pk}/")
    for link in (page.get_by_role("link", name="alice", exact=True).first,
                 page.get_by_role("link", name="bob", exact=True).first):  # fmt: skip
        link.scroll_into_view_if_needed()
        lines = link.evaluate(
            "e => e.getClientRects().length === 1 && e.getBoundingClientRect().height"
            " < 2 * parseFloat(getComputedStyle(e).lineHeight || 20)"
        )
        assert lines, link.inner_text()
    page.screenshot(path=str(SCREENSHOTS / "layout-scopes-phone.png"), full_page=True)
    shots(page, "scopes")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_operator_opens_the_users_own_page(
    page: Page, shots: Shots, viewport: ViewportSize
) -> None:
    project = make_key("acme", "main").key.project
    with project_context(project.pk):
        add_texts(project, ["Alice lives in Lisbon"], user_id="alice")
        add_texts(project, ["Bob likes tea"], user_id="bob")
    operator(project)
    page.set_viewport_size(viewport)
    login(page, "olga", PASSWORD)
    page.goto(f"/dashboard/p/{project.pk}/memories/?user_id=alice")
    page.get_by_role("link", name="Open the user's own page…").click()
    expect(page.get_by_role("heading", name="Open the own page of alice?")).to_be_visible()
    page.get_by_role("button", name="Open the user's page").click()
    expect(page.get_by_role("status")).to_contain_text("Opened by support staff olga")
    expect(page.get_by_text("Alice lives in Lisbon").first).to_be_visible()
    assert "Bob likes tea" not in page.content()
    assert_no_sideways_scroll(page, "the user's page opened by an operator")
    page.screenshot(path=str(SCREENSHOTS / f"layout-user-page-{viewport['width']}.png"))
    shots(page, "user-page")
