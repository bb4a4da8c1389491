"""An operator fixes a memory in the dashboard: log in, open the project, find the memory by
meaning, edit it, delete it, restore it; the history records each step under their name."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from memory.models import Memory, MemoryHistory
from tenants.db import project_context
from tenants.models import Membership
from tests.e2e.helpers import PHONE, Shots, login
from tests.factory import add_texts, make_key

pytestmark = pytest.mark.browser

ALICE = ["Allergic to peanuts", "Lives in Lisbon near the river", "Plays the cello on Sundays"]


def test_an_operator_finds_edits_deletes_and_restores_a_memory(page: Page, shots: Shots) -> None:
    project = make_key("acme", "main").key.project
    with project_context(project.pk):
        add_texts(project, ALICE, user_id="alice")
        add_texts(project, ["Allergic to cats"], user_id="bob")
    olga = get_user_model().objects.create_user("olga", password="a long passphrase")
    Membership.objects.create(
        user=olga, organization=project.organization, role=Membership.Role.ADMIN
    )

    # Log in: a member of one project lands on it, with its users and their memory counts.
    login(page, "olga", "a long passphrase")
    expect(page.get_by_role("heading", level=1)).to_have_text("acme / main")
    users = page.get_by_role("region", name=re.compile("^Users"))
    expect(users.get_by_role("row", name="alice 3")).to_be_visible()
    expect(users.get_by_role("row", name="bob 1")).to_be_visible()
    shots(page, "project")

    # Alice's memories, then a search by meaning: no word of the query is in the memory.
    users.get_by_role("link", name="alice", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Memories of user alice")
    expect(page.get_by_role("heading", name="3 memories, newest first")).to_be_visible()
    shots(page, "alice")
    page.get_by_label("Search (by meaning and words)").fill("which food is dangerous for her")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", level=2)).to_contain_text("which food is dangerous")
    rows = page.locator("table tbody tr")
    expect(rows.first.get_by_role("link")).to_have_text("Allergic to peanuts")
    expect(page.get_by_text("Allergic to cats")).to_have_count(0)  # Bob's, another scope
    shots(page, "search")

    # Edit: the new text shows, and the history has the edit with the operator as actor.
    rows.first.get_by_role("link").click()
    expect(page.locator("blockquote.memory-text")).to_have_text("Allergic to peanuts")
    page.get_by_label("Text", exact=True).fill("Allergic to peanuts and cashews")
    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("status")).to_contain_text("Memory updated. Re-embedded.")
    expect(page.locator("blockquote.memory-text")).to_have_text("Allergic to peanuts and cashews")
    history = page.get_by_role("region", name="History")
    edit = history.get_by_role("row").filter(has_text="UPDATE")
    expect(edit).to_contain_text("user:olga")
    expect(edit).to_contain_text("Allergic to peanuts and cashews")
    shots(page, "edited")

    # Delete, then restore.
    page.get_by_role("button", name="Delete this memory").click()
    expect(page.get_by_role("status")).to_contain_text("Memory deleted")
    expect(page.get_by_role("heading", level=1)).to_contain_text("deleted")
    shots(page, "deleted")
    page.get_by_role("button", name="Restore this memory").click()
    expect(page.get_by_role("status")).to_contain_text("Memory restored.")
    expect(page.get_by_role("heading", level=1)).to_contain_text("active")
    expect(history.get_by_role("row").filter(has_text="RESTORE")).to_contain_text("user:olga")
    shots(page, "restored")

    with project_context(project.pk):
        memory = Memory.objects.get(text="Allergic to peanuts and cashews")
        events = list(
            MemoryHistory.objects.filter(memory_id=memory.pk)
            .order_by("created_at")
            .values_list("event", "actor")
        )
    assert memory.state == Memory.State.ACTIVE
    assert events[1:] == [
        ("UPDATE", "user:olga"),
        ("DELETE", "user:olga"),
        ("RESTORE", "user:olga"),
    ]

    # The list as a phone shows it.
    page.set_viewport_size(PHONE)
    page.get_by_role("link", name="← Memories of user alice").click()
    expect(page.get_by_role("heading", name="3 memories, newest first")).to_be_visible()
    shots(page, "phone-memories")


def test_an_operator_sees_the_cut_asks_for_the_nearest_and_filters_by_a_word(
    page: Page, shots: Shots
) -> None:
    project = make_key("acme", "main").key.project
    with project_context(project.pk):
        add_texts(project, ALICE, user_id="alice")
    olga = get_user_model().objects.create_user("olga", password="a long passphrase")
    Membership.objects.create(
        user=olga, organization=project.organization, role=Membership.Role.READER
    )
    login(page, "olga", "a long passphrase")
    page.get_by_role("link", name="alice", exact=True).click()

    # A question nothing stored is about: said so, with the cut, and the nearest on request.
    page.get_by_label("Search (by meaning and words)").fill("What is her blood type?")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", level=2)).to_contain_text("No memory is about this")
    expect(page.locator(".search-cut")).to_contain_text("cut at 0.5")
    expect(page.locator("table")).to_have_count(0)
    shots(page, "nothing-relevant")
    page.get_by_role("link", name="Show the nearest").click()
    expect(page.locator("tr.below-cut")).to_contain_text("Below the cut of 0.5")
    expect(page.locator("table tbody tr")).to_have_count(2)  # the label, then the memory
    shots(page, "nearest")

    # A word as typed, in any case: a plain filter, labelled as no relevance search.
    page.get_by_label("Search (by meaning and words)").fill("")
    page.get_by_label("Text contains").fill("RIVER")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", level=2)).to_have_text(
        "1 memory whose text contains “RIVER”, newest first"
    )
    expect(page.locator("p.muted", has_text="not a relevance search")).to_be_visible()
    expect(page.locator("table tbody tr")).to_have_count(1)
    shots(page, "contains")
