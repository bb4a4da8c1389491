"""Error pages in a real browser (memory/web/errors.py): an unknown dashboard path, and a form
sent after its CSRF cookie was lost, on the operator's login and on an end user's page; each on
a desktop and a phone, with the dashboards' stylesheet and a way back."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from memory.models import Memory
from tenants import links
from tenants.db import project_context
from tests.e2e.helpers import DESKTOP, PHONE, Shots, login, stylesheet_applied
from tests.factory import add_texts, make_key

pytestmark = pytest.mark.browser

SOFT_BACKGROUND = "rgb(246, 248, 250)"  # --soft in web.css, the header's background


def fits(page: Page) -> bool:
    """Nothing wider than the viewport: no sideways scrolling."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def both_sizes(page: Page, shots: Shots, step: str) -> None:
    """Screenshots of the current page on a desktop, then a phone (which must fit)."""
    page.set_viewport_size(DESKTOP)
    shots(page, f"{step}-desktop")
    page.set_viewport_size(PHONE)
    assert fits(page), step
    shots(page, f"{step}-phone")
    page.set_viewport_size(DESKTOP)


def test_an_unknown_dashboard_path_is_a_page_with_a_way_back(page: Page, shots: Shots) -> None:
    answer = page.goto("/dashboard/no/such/page/")
    assert answer is not None
    assert answer.status == 404
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    expect(page.get_by_role("heading", level=1)).to_have_text("Page not found")
    expect(page.get_by_role("main")).to_contain_text("There is no page at this address")
    expect(page.get_by_role("main")).not_to_contain_text("detail")
    assert stylesheet_applied(page) == SOFT_BACKGROUND
    both_sizes(page, shots, "not-found")

    page.get_by_role("link", name="Back to the dashboard").click()
    expect(page).to_have_url(re.compile(r"/dashboard/login/\?next=/dashboard/$"))

    # The icon every browser asks for is the static one.
    icon = page.request.get("/favicon.ico")
    assert icon.status == 200
    assert icon.url.endswith("/static/engram/favicon.ico")
    assert icon.body().startswith(b"\x00\x00\x01\x00")


def test_a_login_sent_without_its_csrf_cookie_says_the_page_expired(
    page: Page, shots: Shots
) -> None:
    get_user_model().objects.create_superuser("olivia", "olivia@example.com", "correct horse")
    page.goto("/dashboard/login/")
    page.context.clear_cookies()  # the cookie is gone (blocked, expired, cleared)
    page.get_by_label("Username").fill("olivia")
    page.get_by_label("Password").fill("correct horse")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("This page has expired")
    main = page.get_by_role("main")
    expect(main).to_contain_text("the page was open too long")
    expect(main).to_contain_text("allow cookies for this site")
    expect(main).not_to_contain_text("DEBUG")
    expect(main).not_to_contain_text("CSRF verification failed")
    assert stylesheet_applied(page) == SOFT_BACKGROUND
    both_sizes(page, shots, "login-expired")

    # Reloading the login page sets a new cookie; the login then works.
    page.get_by_role("link", name="Reload the page").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Log in to the dashboard")
    login(page, "olivia", "correct horse")
    expect(page.get_by_role("heading", level=1)).not_to_have_text("This page has expired")
    expect(page.get_by_role("button", name="Log out")).to_be_visible()


def test_an_end_users_erasure_sent_without_its_csrf_cookie_erases_nothing(
    page: Page, shots: Shots
) -> None:
    key = make_key("acme", "main")
    project = key.key.project
    with project_context(project.pk):
        add_texts(project, ["Plays the cello on Sundays"], user_id="alice")
    token, _ = links.mint(key.key, "alice", 600)

    page.goto(f"/me/{token}/erase/")
    page.context.clear_cookies()
    page.get_by_role("button", name="Yes, erase everything").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("This page has expired")
    expect(page.get_by_role("main")).to_contain_text("allow cookies for this site")
    expect(page.get_by_role("link", name="Back to your memories")).to_be_visible()
    both_sizes(page, shots, "enduser-expired")
    with project_context(project.pk):
        assert Memory.objects.filter(user_id="alice", state=Memory.State.ACTIVE).count() == 1

    page.get_by_role("link", name="Reload the page").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "Erase everything remembered about you?"
    )
