"""The graph through an edit and a restore (issue #50, part 3, item 2), in Chromium on a desktop
and a phone: the memory page lists the graph facts it backs, an edit warns naming the fact it
ended, and making the old text current again brings it back.

Each step saves a screenshot to /tmp/graph-edit-<step>-<viewport>.png, to look at."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, ViewportSize, expect

from memory import graph
from tenants.db import project_context
from tests.e2e.helpers import DESKTOP, PHONE, Shots, login
from tests.e2e.test_display import PASSWORD, SCREENSHOTS, assert_no_sideways_scroll, name, operator
from tests.factory import add_texts, make_key

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_an_edit_names_the_fact_it_ends_and_the_restore_brings_it_back(
    page: Page, shots: Shots, viewport: ViewportSize
) -> None:
    project = make_key("acme", "main").key.project
    with project_context(project.pk):
        [memory] = add_texts(project, ["Alice lives in Berlin"], user_id="alice")
    graph.upsert_relation(
        project.pk, "alice", "lives in", "berlin", graph.Scope(user_id="alice"), memory_id=memory.pk
    )
    operator(project)
    page.set_viewport_size(viewport)
    login(page, "olga", PASSWORD)
    page.goto(f"/dashboard/p/{project.pk}/memories/{memory.pk}/")
    facts = page.get_by_role("region", name="Graph facts")
    expect(facts).to_contain_text("alice → lives_in → berlin")
    expect(facts).to_contain_text("backed")

    page.get_by_label("Text", exact=True).fill("Alice lives in Hamburg")
    page.get_by_role("button", name="Save changes").click()
    warning = page.locator(".message.warning")
    expect(warning).to_contain_text("alice → lives_in → berlin")
    expect(warning).to_contain_text("brings them back")
    expect(facts).to_contain_text("ended")
    assert_no_sideways_scroll(page, "the memory page after an edit")
    page.screenshot(
        path=str(SCREENSHOTS / f"graph-edit-ended-{name(viewport)}.png"), full_page=True
    )
    shots(page, "edit-ended")

    page.get_by_role("button", name="Make this text current again").first.click()
    expect(page.locator(".message.success")).to_contain_text(
        "hold again: alice → lives_in → berlin"
    )
    expect(facts).to_contain_text("backed")
    expect(page.locator("blockquote.memory-text")).to_have_text("Alice lives in Berlin")
    page.screenshot(path=str(SCREENSHOTS / f"graph-edit-back-{name(viewport)}.png"), full_page=True)
    shots(page, "restored")
