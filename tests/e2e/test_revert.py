"""Undo in the dashboards (issue #27), in Chromium on a desktop and a phone: on the operator's,
a memory's versions with what changed and what caused it, and an add request reverted after a
confirmation; on the end user's, one memory deleted, brought back, then erased for good.
Screenshots: /tmp/revert-<step>-<viewport>.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, ViewportSize, expect

from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.pipeline import process_event
from memory.models import Memory, MemoryEvent
from tenants import links
from tenants.db import project_context
from tenants.models import Membership, Project
from tests.e2e.helpers import DESKTOP, PHONE, Shots, login
from tests.factory import add_texts, make_key

pytestmark = pytest.mark.browser
PASSWORD = "a long passphrase"
SCOPE = {"user_id": "alice", "agent_id": None, "app_id": None, "run_id": None}
SCREENSHOTS = Path("/tmp")  # noqa: S108 (screenshots to look at, as asked in #27)
WIDTHS = "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"


def said(project: Project, text: str) -> MemoryEvent:
    with project_context(project.pk):
        payload = {"messages": [{"role": "user", "content": text}], "scope": SCOPE}
        event = MemoryEvent.objects.create(project=project, payload=payload, **SCOPE)
    process_event(event.id, project.pk, OfflineExtractor())
    return event


def active(project: Project) -> list[str]:
    with project_context(project.pk):
        return list(Memory.objects.filter(state="active").values_list("text", flat=True))


def shot(page: Page, shots: Shots, step: str, viewport: ViewportSize) -> None:
    where = "phone" if viewport is PHONE else "desktop"
    shots(page, f"{step}-{where}")
    page.screenshot(path=str(SCREENSHOTS / f"revert-{step}-{where}.png"), full_page=True)
    scroll, width = page.evaluate(WIDTHS)
    assert scroll <= width, f"{step} scrolls sideways on the {where}: {scroll} > {width}"


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_versions_and_a_revert_in_the_browser(
    page: Page, shots: Shots, viewport: ViewportSize
) -> None:
    project = make_key("acme", "main").key.project
    olga = get_user_model().objects.create_user("olga", password=PASSWORD)
    Membership.objects.create(user=olga, organization=project.organization, role="admin")
    said(project, "I live in Austin.")
    moved = said(project, "I live in Porto.")
    page.set_viewport_size(viewport)
    login(page, "olga", PASSWORD)

    with project_context(project.pk):
        porto = Memory.objects.get(text="I live in Porto.")
    page.goto(f"/dashboard/p/{project.pk}/memories/{porto.pk}/")
    versions = page.locator("section[aria-labelledby=versions-h]")
    expect(versions.get_by_role("heading", name="Versions")).to_be_visible()
    expect(versions.locator("li.version")).to_have_count(2)
    expect(versions.locator("li.version").first.locator("del")).to_have_text("Austin.")
    expect(versions.locator("li.version").first.locator("ins")).to_have_text("Porto.")
    expect(versions.locator("li.version").first).to_contain_text("decided by the offline extractor")
    shot(page, shots, "versions", viewport)

    page.goto(f"/dashboard/p/{project.pk}/events/{moved.pk}/")
    page.get_by_role("link", name="Revert this add request…").click()
    expect(page.get_by_role("heading", name="What it did")).to_be_visible()
    shot(page, shots, "confirm", viewport)
    assert active(project) == ["I live in Porto."]  # the confirmation page changes nothing
    page.get_by_role("button", name="Revert this add request").click()
    expect(page.get_by_text("Reverted: 1 memory deleted, 1 restored.")).to_be_visible()
    expect(page.get_by_text("by user:olga")).to_be_visible()
    expect(page.get_by_role("link", name="Revert this add request…")).to_have_count(0)
    shot(page, shots, "reverted", viewport)
    assert active(project) == ["I live in Austin."]


def open_memory(page: Page, text: str) -> None:
    """From the end user's list, the page of the memory that says `text`."""
    item = page.locator("ul.enduser-memories > li", has_text=text).first
    item.get_by_role("link", name="Where it came from").click()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_an_end_user_deletes_undoes_and_erases_one_memory(
    page: Page, shots: Shots, viewport: ViewportSize
) -> None:
    key = make_key("acme", "main")
    project = key.key.project
    with project_context(project.pk):
        add_texts(project, ["Plays the cello on Sundays", "Allergic to peanuts"], user_id="alice")
    token, _ = links.mint(key.key, "alice", 3600)
    page.set_viewport_size(viewport)
    page.goto(f"/me/{token}/")
    open_memory(page, "Allergic to peanuts")
    page.get_by_role("link", name="Delete this memory…").click()
    expect(page.get_by_role("heading", name="Delete this memory?")).to_be_visible()
    expect(page.get_by_text("kept for 30 days")).to_be_visible()
    shot(page, shots, "enduser-delete", viewport)
    page.get_by_role("button", name="Delete it").click()
    expect(page.get_by_text("The memory is deleted.")).to_be_visible()
    deleted = page.locator("section[aria-labelledby=deleted-h]")
    expect(deleted).to_contain_text("Allergic to peanuts")
    shot(page, shots, "enduser-deleted", viewport)
    assert active(project) == ["Plays the cello on Sundays"]

    deleted.get_by_role("button", name="Undo the delete").click()
    expect(page.get_by_text("The memory is back.")).to_be_visible()
    assert sorted(active(project)) == ["Allergic to peanuts", "Plays the cello on Sundays"]

    open_memory(page, "Allergic to peanuts")
    page.get_by_role("link", name="Delete this memory…").click()
    page.get_by_role("button", name="Erase it for good now").click()
    expect(page.get_by_text("The memory is erased for good.")).to_be_visible()
    expect(page.get_by_text("Allergic to peanuts")).to_have_count(0)
    shot(page, shots, "enduser-erased", viewport)
    with project_context(project.pk):
        assert Memory.objects.filter(text="Allergic to peanuts").count() == 0
