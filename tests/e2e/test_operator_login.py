"""The operator dashboard's login, in a real browser: wrong password, then the right one."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from tests.e2e.helpers import Shots, login, stylesheet_applied
from tests.factory import make_key

pytestmark = pytest.mark.browser

SOFT_BACKGROUND = "rgb(246, 248, 250)"  # --soft in web.css, the header's background


def test_an_operator_logs_in_and_sees_the_projects(page: Page, shots: Shots) -> None:
    make_key("acme", "main")
    make_key("globex", "support")
    get_user_model().objects.create_superuser("olivia", "olivia@example.com", "correct horse")

    css = []
    page.on("response", lambda r: css.append(r.status) if r.url.endswith("/web.css") else None)
    page.goto("/dashboard/")  # not logged in: sent to the login page
    expect(page).to_have_url(re.compile(r"/dashboard/login/\?next=/dashboard/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Log in to the dashboard")
    assert css == [200]
    assert stylesheet_applied(page) == SOFT_BACKGROUND
    shots(page, "login-page")

    login(page, "olivia", "wrong")
    expect(page.get_by_role("alert")).to_contain_text("didn't match")
    shots(page, "wrong-password")

    login(page, "olivia", "correct horse")
    expect(page.get_by_role("heading", level=1)).to_have_text("Projects")
    expect(page.get_by_role("link", name="acme / main")).to_be_visible()
    expect(page.get_by_role("link", name="globex / support")).to_be_visible()
    shots(page, "projects")

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/dashboard/login/$"))
