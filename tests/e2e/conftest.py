"""End-to-end tests: a real headless Chromium, driven by Playwright, against the live server.

- The browser is Debian's `chromium` at /usr/bin/chromium (`make test` installs it with
  scripts/install-browser.sh); Playwright only drives it (`executable_path`), its own browser
  download is never used. Playwright gives every launch a fresh, empty profile directory.
- The server is pytest-django's live server on the test database (`live_api`), with really
  committed rows; it serves the static files (the dashboard's CSS) too.
- Every test gets a fresh browser context (cookies, storage) and a `Shots` helper: each step's
  screenshot goes to `.local/artifacts/e2e/<test name>/<NN>-<step>.png` (git-ignored; the
  directory is emptied when the test starts, so it always holds the last run).
- A page that breaks the Content-Security-Policy (an inline script or style) fails its test.

Playwright's synchronous API marks an asyncio loop as running in this thread while the
browser is up, which Django's async-safety check would take for an async context: the package
fixture sets DJANGO_ALLOW_ASYNC_UNSAFE for these tests only and puts it back afterwards.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from tests.e2e.helpers import DESKTOP, Shots

CHROMIUM = Path("/usr/bin/chromium")
# Playwright adds --headless and a fresh --user-data-dir of its own (a new temporary profile
# per launch; it refuses one given here). Without the networking flags Chromium calls Google's
# hosts at start, which a closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(settings.BASE_DIR) / ".local" / "artifacts" / "e2e"


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the end-to-end tests need Debian's Chromium. "
            "`make test` installs it (scripts/install-browser.sh).",
            pytrace=False,
        )
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser: Browser, live_api: str) -> Iterator[Page]:
    """A fresh browser context on the live server (relative URLs work: page.goto("/...")."""
    context = browser.new_context(base_url=live_api, viewport=DESKTOP, accept_downloads=True)
    context.set_default_timeout(10_000)
    page = context.new_page()
    violations: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            violations.append(message.text)

    page.on("console", on_console)
    yield page
    context.close()
    assert not violations, f"Content-Security-Policy violations: {violations}"


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Shots:
    directory = ARTIFACTS / re.sub(r"[^\w.-]+", "_", request.node.name)
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.png"):
        old.unlink()
    return Shots(directory)
