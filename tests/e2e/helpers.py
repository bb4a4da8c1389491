"""What the end-to-end tests do often: screenshots of steps, logging in, checking the CSS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import Page, ViewportSize

DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}


class Shots:
    """Numbered screenshots of one test's steps, kept as artifacts."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.count = 0

    def __call__(self, page: Page, step: str, *, full_page: bool = True) -> Path:
        self.count += 1
        path = self.directory / f"{self.count:02d}-{step}.png"
        page.screenshot(path=str(path), full_page=full_page)
        return path


def login(page: Page, username: str, password: str) -> None:
    """Log in through the operator login form, as a person would."""
    page.goto("/dashboard/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def stylesheet_applied(page: Page) -> Any:
    """The dashboard's CSS really loaded: the header takes its background from web.css."""
    return page.locator("header.top").evaluate("e => getComputedStyle(e).backgroundColor")
