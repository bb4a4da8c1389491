"""What a project costs (issue #27, §3 "Cost per user"; issue #50, the Usage page), in Chromium on
a desktop (1280 by 800) and a phone (390 by 844): the Usage page's model cost at the operator's
prices, API calls per day and per endpoint, usage by user and by agent, a user's usage per day
(through the link in the user's row), the reranker's usage per day, and the project page's top
spenders; every table visible, no page scrolling sideways.

Each step also saves a screenshot to /tmp/usage-<page>-<viewport>.png, to look at."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Page, ViewportSize, expect

from config.prices import parse_prices
from memory import actions
from memory.models import MemoryEvent
from tenants.db import project_context
from tests.e2e.helpers import DESKTOP, PHONE, Shots, login
from tests.e2e.test_display import (
    EVIL,
    PASSWORD,
    SCREENSHOTS,
    assert_no_sideways_scroll,
    name,
    operator,
)
from tests.factory import auth, make_key

pytestmark = pytest.mark.browser

VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
LONG_ID = "customer-" + "0123456789" * 6  # no place to break it but its hyphen


def spend(project: Any, days_ago: int, calls: int, tokens_in: int, **scope: Any) -> None:
    usage = {"calls": calls, "input_tokens": tokens_in, "output_tokens": tokens_in // 10,
             "model": "claude-haiku-5-5"}  # fmt: skip
    with project_context(project.pk):
        event = MemoryEvent.objects.create(
            project=project, payload={"messages": []}, status="SUCCEEDED", usage=usage, **scope
        )
        moment = timezone.now() - timedelta(days=days_ago)
        MemoryEvent.objects.filter(pk=event.pk).update(created_at=moment)


def screenshot(page: Page, shots: Shots, what: str, viewport: ViewportSize) -> None:
    shots(page, f"{what}-{name(viewport)}")
    page.screenshot(path=str(SCREENSHOTS / f"usage-{what}-{name(viewport)}.png"), full_page=True)


@VIEWPORTS
def test_usage_per_user_and_agent_and_the_top_spenders(
    page: Page, shots: Shots, viewport: ViewportSize, settings: Any
) -> None:
    settings.ENGRAM_MODEL_PRICES = parse_prices('{"claude-haiku-5-5": {"input": 1, "output": 5}}')
    made = make_key("acme", "main")
    project = made.key.project
    other = make_key("globex", "main").key.project
    for path in ("/v1/ping/", "/v1/ping/", "/v1/memories/?user_id=alice"):
        Client().get(path, headers=auth(made.raw))  # API calls: 3 answered ...
    bad = {"messages": "hi", "infer": False}  # ... and 1 refused (400)
    Client().post("/v1/memories/", bad, content_type="application/json", headers=auth(made.raw))
    for day in range(6):
        spend(project, day, 2, 12_000 + day, user_id="alice", agent_id="travel-assistant")
        spend(project, day * 2, 1, 3_000, user_id="bob", agent_id="tutor")
    spend(project, 1, 1, 900, user_id=EVIL, agent_id="tutor")
    spend(project, 2, 4, 250_000, user_id=LONG_ID, agent_id=LONG_ID)
    spend(project, 45, 9, 9_999_999, user_id="carol")  # before the last 30 days
    spend(other, 0, 7, 7_777_777, user_id="alice")  # another project's
    for reranked, tokens in ((True, 1_200), (False, 0), (True, 800)):  # searches with rerank
        actions.do_count_rerank(
            project.pk, reranked=reranked, calls=1, input_tokens=tokens, output_tokens=0
        )
    actions.do_count_rerank(other.pk, reranked=True, calls=1, input_tokens=6_666, output_tokens=0)
    operator(project)
    page.set_viewport_size(viewport)
    login(page, "olga", PASSWORD)
    base = f"/dashboard/p/{project.pk}/"

    # The Usage page: the model's cost at the operator's price, the API calls.
    page.goto(base + "usage/")
    cost = page.get_by_role("region", name="Model cost").get_by_role("table")
    expect(cost).to_be_visible()
    expect(cost.locator("tbody tr")).to_have_count(2)  # the priced model, then the reranker
    expect(cost.locator("tbody tr").first).to_contain_text("claude-haiku-5-5")
    # 340,915 input tokens at $1 per million and 34,090 output tokens at $5; the reranker's
    # calls (ENGRAM_RERANK_MODEL not set) have no price.
    expect(cost.locator("tfoot")).to_contain_text("0.5114")
    expect(cost.locator("tbody tr").nth(1)).to_contain_text("no price set")
    calls = page.get_by_role("region", name="API calls per day").get_by_role("table")
    calls.scroll_into_view_if_needed()
    expect(calls.locator("tfoot")).to_have_text(re.compile(r"Total\s*4\s*1\s*0"))
    endpoints = page.get_by_role("region", name="API calls per endpoint").get_by_role("table")
    expect(endpoints.locator("tbody tr").first).to_contain_text("GET ping")
    # Usage by user and by agent, the most tokens first, numbers grouped.
    users = page.get_by_role("region", name="Usage by user", exact=True).get_by_role("table")
    agents = page.get_by_role("region", name="Usage by agent", exact=True).get_by_role("table")
    for table in (users, agents):
        table.scroll_into_view_if_needed()
        expect(table).to_be_visible()
    rows = users.locator("tbody tr")
    expect(rows).to_have_count(4)  # alice, bob, the overriding id, the long one; not carol
    expect(rows.first).to_contain_text(LONG_ID)
    expect(rows.first).to_contain_text("250,000")
    expect(rows.nth(1)).to_contain_text("alice")
    expect(rows.nth(1)).to_contain_text("72,015")  # 12,000 to 12,005 input tokens, 6 requests
    expect(agents.locator("tbody tr")).to_have_count(3)
    usage = page.get_by_role("region", name="Model usage by user and agent").inner_text()
    assert "carol" not in usage and "9,999,999" not in usage  # her request is listed, below
    assert "7,777,777" not in page.content()
    # The reranker's usage per day: today's searches, those reordered, calls and tokens.
    reranker = page.get_by_role("region", name="Reranker usage per day").get_by_role("table")
    reranker.scroll_into_view_if_needed()
    expect(reranker).to_be_visible()
    expect(reranker.locator("tbody tr")).to_have_count(1)
    expect(reranker.locator("tfoot")).to_contain_text("2,000")
    assert "6,666" not in page.content()  # another project's
    assert_no_sideways_scroll(page, "the usage page")
    screenshot(page, shots, "usage", viewport)
    region = page.get_by_role("region", name="Model usage by user and agent")
    region.screenshot(path=str(SCREENSHOTS / f"usage-tables-{name(viewport)}.png"))

    # Alice's row leads to her usage per day, and from there to her requests.
    users.get_by_role("link", name="alice", exact=True).click()
    expect(page).to_have_url(f"{page.url.split('?')[0]}?user_id=alice")
    per_day = page.get_by_role("region", name="Model usage of user alice per day")
    expect(per_day.get_by_role("table")).to_be_visible()
    expect(per_day.locator("tbody tr")).to_have_count(6)
    expect(per_day.locator("tfoot")).to_contain_text("72,015")
    assert_no_sideways_scroll(page, "alice's usage")
    screenshot(page, shots, "user", viewport)
    page.get_by_role("link", name="This user's add requests").click()
    expect(page.locator("table.events tbody tr")).to_have_count(6)

    # The project page: the top spenders, each linking to its requests.
    page.goto(base)
    spenders = page.get_by_role("region", name="Top spenders, last 30 days")
    spenders.scroll_into_view_if_needed()
    expect(spenders.get_by_role("table")).to_be_visible()
    expect(spenders.locator("tbody tr")).to_have_count(4)
    expect(spenders.locator("tbody tr").first).to_contain_text("250,000")
    assert_no_sideways_scroll(page, "the project page")
    screenshot(page, shots, "project", viewport)
    spenders.get_by_role("link", name="bob", exact=True).click()
    expect(page.get_by_role("region", name="Model usage of user bob per day")).to_be_visible()
