"""An end user follows the link their application minted: search, see where a memory came from,
correct it, download everything as JSON, then request erasure and confirm it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from audit.models import ErasureRequest
from memory import actions
from memory.models import Memory
from tenants.db import project_context
from tests.e2e.helpers import PHONE, Shots
from tests.factory import add_texts, make_key

pytestmark = pytest.mark.browser

ALICE = ["Plays the cello on Sundays", "Lives in Lisbon near the river", "Allergic to peanuts"]


def texts(project_id: uuid.UUID, user_id: str) -> set[str]:
    with project_context(project_id):
        return set(
            Memory.objects.filter(user_id=user_id, state=Memory.State.ACTIVE).values_list(
                "text", flat=True
            )
        )


def test_an_end_user_searches_corrects_downloads_and_erases(
    page: Page, shots: Shots, live_api: str
) -> None:
    key = make_key("acme", "main")
    project = key.key.project
    with project_context(project.pk):
        add_texts(project, ALICE, user_id="alice")
        add_texts(project, ["Plays the violin in a band"], user_id="bob")

    # The application mints the link through the API, as it would for its user.
    answer = httpx.post(
        f"{live_api}/v1/users/alice/dashboard-link/",
        json={"expires_in": 600},
        headers={"Authorization": f"Token {key.raw}"},
    )
    assert answer.status_code == 200, answer.text
    url = answer.json()["url"]
    assert url.startswith(f"{live_api}/me/")

    # A tampered link is refused with a plain page.
    refused = page.goto(url.rstrip("/") + "x/")
    assert refused is not None
    assert refused.status == 403
    expect(page.get_by_role("heading", level=1)).to_have_text("This link cannot be used")

    page.goto(url)
    expect(page.get_by_role("heading", level=1)).to_have_text("What acme remembers about you")
    memories = page.locator("ul.enduser-memories > li")
    expect(memories).to_have_count(3)
    expect(page.get_by_text("Plays the violin in a band")).to_have_count(0)  # Bob's
    shots(page, "home")

    # Search by meaning.
    page.get_by_label("Search your memories").fill("musical instrument")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("heading", level=2)).to_have_text(
        "Your memories about “musical instrument”"
    )
    expect(memories.first.locator(".enduser-text")).to_have_text("Plays the cello on Sundays")
    shots(page, "search")
    # A question nothing remembered is about: said so, nothing listed.
    page.get_by_label("Search your memories").fill("What is my blood type?")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("heading", level=2)).to_contain_text("No memory is about this")
    expect(memories).to_have_count(0)
    shots(page, "nothing-relevant")
    page.get_by_label("Search your memories").fill("musical instrument")
    page.get_by_role("button", name="Search").click()

    # Where it came from, then a correction: its versions say "you" made it.
    memories.first.get_by_role("link").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("A memory")
    used = page.locator("ol.enduser-sources > li.used")
    expect(used).to_have_count(1)
    expect(used).to_contain_text("Plays the cello on Sundays")
    page.get_by_label("Corrected text").fill("Plays the viola on Sundays")
    page.get_by_role("button", name="Save the correction").click()
    expect(page.get_by_role("status")).to_contain_text("Your correction is saved.")
    expect(page.locator("blockquote.enduser-text")).to_have_text("Plays the viola on Sundays")
    # Its versions, newest first: the correction, by "you", with the word it changed.
    change = page.locator("ol.versions > li.version-current")
    expect(change).to_contain_text("you")
    expect(change.locator("del")).to_have_text("cello")
    expect(change.locator("ins")).to_have_text("viola")
    shots(page, "corrected")
    assert texts(project.pk, "alice") == {
        "Plays the viola on Sundays", "Lives in Lisbon near the river", "Allergic to peanuts",
    }  # fmt: skip

    # The right of access: everything as a JSON file.
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Download all (JSON)").click()
    download = download_info.value
    assert download.suggested_filename == "my-memories.json"
    body = json.loads(Path(download.path()).read_text(encoding="utf-8"))
    assert (body["user_id"], body["count"]) == ("alice", 3)
    by_text = {m["text"]: m for m in body["memories"]}
    assert set(by_text) == texts(project.pk, "alice")
    corrected = by_text["Plays the viola on Sundays"]
    assert [(c["event"], c["by"]) for c in corrected["history"]][-1] == ("UPDATE", "you")
    assert all(m["user_id"] == "alice" for m in body["memories"])

    # The right to erasure, with a confirmation step.
    page.set_viewport_size(PHONE)
    page.get_by_role("link", name="Erase everything").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "Erase everything remembered about you?"
    )
    expect(page.get_by_role("main")).to_contain_text("your 3 memories")
    shots(page, "erase-confirm-phone")
    page.get_by_role("button", name="Yes, erase everything").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Your erasure is under way")
    shots(page, "erased-phone")

    # Hidden at once; the queued erasure removes the rows; Bob's memory is untouched.
    assert texts(project.pk, "alice") == set()
    with project_context(project.pk):
        request = ErasureRequest.objects.get(project=project)
    assert request.status == ErasureRequest.Status.PENDING
    assert actions.do_run_erasure(project.pk, request.pk) is True
    with project_context(project.pk):
        assert not Memory.objects.filter(user_id="alice").exists()
    assert texts(project.pk, "bob") == {"Plays the violin in a band"}
    page.get_by_role("link", name="Memories").click()
    expect(page.get_by_text("Nothing is remembered about you here.")).to_be_visible()
