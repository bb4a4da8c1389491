"""What the dashboards call things (issue #50, part 3), in Chromium on a desktop and a phone:
a reverted add request says REVERTED in the list and on its page with each change marked
undone; a memory stored as sent has no add-request link; an empty list says "No memories"; the
end user's list counts their memories and says "changed" only of a changed one. Each page fits
the viewport (no sideways scroll)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, ViewportSize, expect

from memory.models import Memory
from tenants import links
from tenants.db import project_context
from tenants.models import Membership
from tests.e2e.helpers import DESKTOP, PHONE, Shots, login
from tests.e2e.test_revert import said, shot
from tests.factory import add_texts, make_key

pytestmark = pytest.mark.browser
PASSWORD = "a long passphrase"


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_pages_name_what_happened(page: Page, shots: Shots, viewport: ViewportSize) -> None:
    key = make_key("acme", "main")
    project = key.key.project
    olga = get_user_model().objects.create_user("olga", password=PASSWORD)
    Membership.objects.create(user=olga, organization=project.organization, role="admin")
    said(project, "I live in Austin.")
    moved = said(project, "I live in Porto.")
    with project_context(project.pk):
        (bees,) = add_texts(project, ["I keep bees."], user_id="alice")
    page.set_viewport_size(viewport)
    login(page, "olga", PASSWORD)

    # Revert the move, then the request says so.
    events = f"/dashboard/p/{project.pk}/events/"
    page.goto(f"{events}{moved.pk}/revert/")
    page.get_by_role("button", name="Revert this add request").click()
    expect(page.locator(".badge.status-reverted").first).to_have_text("REVERTED")
    expect(page.get_by_text("Reverted: every change below was undone.")).to_be_visible()
    expect(page.locator("td .badge.status-reverted")).to_have_text(["undone"])
    shot(page, shots, "reverted-request", viewport)
    page.goto(events)
    expect(page.locator("table.events .badge.status-reverted")).to_have_count(1)
    page.goto(f"{events}?status=REVERTED")
    expect(page.locator("table.events tbody tr")).to_have_count(1)
    shot(page, shots, "reverted-filter", viewport)

    # A memory stored as sent: its version names no add request (it has no event page).
    page.goto(f"/dashboard/p/{project.pk}/memories/{bees.pk}/")
    expect(page.locator(".versions .version")).to_have_count(1)
    expect(page.locator(".versions").get_by_role("link", name="add request")).to_have_count(0)
    shot(page, shots, "verbatim-memory", viewport)

    # A user with no memories.
    page.goto(f"/dashboard/p/{project.pk}/memories/?user_id=nobody")
    expect(page.get_by_role("heading", name="No memories", exact=True)).to_be_visible()
    shot(page, shots, "no-memories", viewport)

    # The end user's list: counted; "changed" on the edited one only.
    with project_context(project.pk):
        austin = Memory.objects.get(text="I live in Austin.", state="active")
    token, _ = links.mint(key.key, "alice", 3600)
    page.goto(f"/me/{token}/m/{austin.pk}/")
    page.get_by_label("Corrected text").fill("I live in Austin, Texas.")
    page.get_by_role("button", name="Save the correction").click()
    page.goto(f"/me/{token}/")
    expect(page.get_by_role("heading", name="All your memories: 2")).to_be_visible()
    items = page.locator("ul.enduser-memories > li")
    expect(items.filter(has_text="I live in Austin, Texas.")).to_contain_text(", changed ")
    expect(items.filter(has_text="I keep bees.")).not_to_contain_text("changed")
    shot(page, shots, "enduser-list", viewport)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_very_long_memory_is_folded_on_the_end_users_pages(
    page: Page, shots: Shots, viewport: ViewportSize
) -> None:
    key = make_key("acme", "main")
    long_text = " ".join(f"I noted fact number {n} about my garden." for n in range(250))
    assert len(long_text) > 9000
    with project_context(key.key.project.pk):
        (memory,) = add_texts(key.key.project, [long_text], user_id="alice")
    token, _ = links.mint(key.key, "alice", 3600)
    page.set_viewport_size(viewport)
    for path, step in ((f"/me/{token}/", "list"), (f"/me/{token}/m/{memory.pk}/", "memory")):
        page.goto(path)
        expect(page.get_by_text(f"Show all {len(long_text):,} characters").first).to_be_visible()
        height = page.evaluate("() => document.documentElement.scrollHeight")
        assert height < 3000, f"the {step} page is {height} px tall"
        shot(page, shots, f"long-{step}", viewport)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_confirmations_and_the_erasures_in_the_browser(
    page: Page, shots: Shots, viewport: ViewportSize
) -> None:
    key = make_key("acme", "main")
    project = key.key.project
    olga = get_user_model().objects.create_user("olga", password=PASSWORD)
    Membership.objects.create(user=olga, organization=project.organization, role="owner")
    bob = get_user_model().objects.create_user("bob", email="bob@example.com")
    member = Membership.objects.create(user=bob, organization=project.organization, role="reader")
    with project_context(project.pk):
        tea, _ = add_texts(project, ["I drink green tea", "I live in Oslo"], user_id="alice")
    page.set_viewport_size(viewport)
    login(page, "olga", PASSWORD)
    base = f"/dashboard/p/{project.pk}/"

    # Erase one memory for good: a confirmation, then the skeleton.
    page.goto(f"{base}memories/{tea.pk}/")
    page.get_by_role("link", name="Erase for good…").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Erase this memory for good?")
    shot(page, shots, "memory-erase", viewport)
    page.get_by_role("button", name="Erase for good").click()
    expect(page.get_by_role("status")).to_contain_text("erased for good")
    expect(page.locator("blockquote.memory-text")).to_have_text("[redacted]")

    # Erase the user: a confirmation, then the erasure list.
    page.goto(f"{base}memories/?user_id=alice")
    page.get_by_role("link", name="Erase this user…").click()
    expect(page.get_by_text("Their 1 memory is hidden")).to_be_visible()
    shot(page, shots, "user-erase", viewport)
    page.get_by_role("button", name="Erase this user").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Erasures")
    expect(page.locator("table tbody tr")).to_have_count(1)
    expect(page.locator("table tbody tr")).to_contain_text("user:olga")
    shot(page, shots, "erasures", viewport)

    # Removing a member asks first.
    page.goto(f"{base}settings/")
    page.get_by_role("link", name="Remove… bob").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Remove “bob”")
    shot(page, shots, "member-remove", viewport)
    page.get_by_role("button", name="Remove this member").click()
    expect(page.get_by_role("status")).to_contain_text("is no longer a member")
    assert not Membership.objects.filter(pk=member.pk).exists()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_projects_page_counts_and_finds(
    page: Page, shots: Shots, viewport: ViewportSize
) -> None:
    for org, name in (("acme", "main"), ("acme", "staging"), ("globex", "support")):
        make_key(org, name)
    get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
    page.set_viewport_size(viewport)
    login(page, "root", PASSWORD)
    page.goto("/dashboard/")
    expect(page.get_by_text("3 projects.")).to_be_visible()
    page.get_by_label("Find a project or an organization").fill("glob")
    page.get_by_role("button", name="Find").click()
    expect(page.locator("ul.cards li")).to_have_text(["globex / support"])
    shot(page, shots, "projects-found", viewport)
