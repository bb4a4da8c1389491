"""The Usage page (issue #50, part 3, item 9): every API call the project's keys made, per day
and per endpoint, and the models' calls and tokens with their cost at the operator's prices
(ENGRAM_MODEL_PRICES); the prices' parsing; the model an event's usage records."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django.utils import timezone

from config.prices import Price, parse_prices
from memory import actions
from memory.extraction.llm.types import Usage
from tests.memory.test_web_operations import HOSTILE, OperationsTestCase

PRICES = parse_prices('{"claude-haiku-5-5": {"input": 1, "output": 5, "cache_read": 0.1}}')


class UsagePageTestCase(OperationsTestCase):
    def test_it_counts_every_api_call_per_day_and_per_endpoint(self) -> None:
        assert self.call("get", "/v1/ping/").status_code == 200
        assert self.call("get", "/v1/ping/").status_code == 200
        bad = {"messages": "hi", "infer": False}
        assert self.call("post", "/v1/memories/", bad).status_code == 400
        said = {"messages": [{"role": "user", "content": "I like tea"}], "user_id": "alice"}
        added = self.call("post", "/v1/memories/", said | {"infer": False})
        assert added.status_code == 200  # an add stored as sent: no model, still a call
        assert self.call("get", "/v1/ping/", who=self.charlie).status_code == 200  # not ours
        self.client.logout()
        page = self.get(self.rita, "usage")
        [today] = page.context["calls"]
        assert today["day"] == timezone.localdate()
        assert (today["calls"], today["client_errors"], today["server_errors"]) == (4, 1, 0)
        assert page.context["call_totals"] == {"calls": 4, "client_errors": 1, "server_errors": 0}
        endpoints = {(e["method"], e["action"]): e for e in page.context["endpoints"]}
        assert sorted((k, e["calls"], e["client_errors"]) for k, e in endpoints.items()) == [
            (("GET", "ping"), 2, 0),
            (("POST", "memories-v1"), 2, 1),
        ]
        ping = endpoints["GET", "ping"]
        assert 0 < ping["p50_ms"] <= ping["p95_ms"]
        content = page.content.decode()
        assert "API calls per endpoint" in content and "<bdi>ping</bdi>" in content

    def test_without_prices_it_counts_tokens_and_says_no_price_is_set(self) -> None:
        self.make_event(usage={"calls": 2, "input_tokens": 1000, "output_tokens": 100,
                               "model": "claude-haiku-5-5"})  # fmt: skip
        self.make_event(usage={"calls": 1, "input_tokens": 10, "output_tokens": 1})  # no model
        self.make_event(usage={"calls": 0, "input_tokens": 0, "output_tokens": 0})  # offline
        page = self.get(self.rita, "usage")
        costs = [
            (c.source, c.model, c.calls, c.input_tokens, c.cost) for c in page.context["costs"]
        ]
        assert costs == [
            ("extraction", "claude-haiku-5-5", 2, 1000, None),
            ("extraction", "", 1, 10, None),
        ]
        assert page.context["total_cost"] is None
        content = page.content.decode()
        assert "no price set" in content and "ENGRAM_MODEL_PRICES" in content

    @override_settings(ENGRAM_MODEL_PRICES=PRICES, ENGRAM_RERANK="judge")
    def test_it_prices_each_models_tokens_and_each_day(self) -> None:
        spent = {"calls": 2, "input_tokens": 1_000_000, "output_tokens": 200_000,
                 "cache_read_input_tokens": 500_000, "model": "claude-haiku-5-5"}  # fmt: skip
        self.make_event(usage=spent)
        nothing = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0}
        self.make_event(days_ago=1, usage=spent | nothing | {"calls": 1})
        self.make_event(usage={"calls": 1, "input_tokens": 7, "output_tokens": 7,
                               "model": "some-other-model"})  # fmt: skip
        self.make_event(days_ago=45, usage=spent)  # outside the 30 days
        self.make_event(project=self.charlie.key.project, usage=spent)  # another project's
        actions.do_count_rerank(
            self.project_id, reranked=True, calls=1, input_tokens=100_000, output_tokens=0
        )
        page = self.get(self.rita, "usage")
        found = {(c.source, c.model): c for c in page.context["costs"]}
        haiku = found["extraction", "claude-haiku-5-5"]
        # 1M input at $1, 200k output at $5, 500k cache reads at $0.1 per million.
        assert (haiku.calls, haiku.cost) == (3, pytest.approx(1 + 1 + 0.05))
        assert found["extraction", "some-other-model"].cost is None
        # The judge reranker is the extraction model: its 100k input tokens at $1.
        assert found["reranker", "claude-haiku-5-5"].cost == pytest.approx(0.1)
        assert page.context["total_cost"] == pytest.approx(2.15)
        today, yesterday = page.context["days"]
        assert (today["cost"], today["unpriced"]) == (pytest.approx(2.05), True)
        assert (yesterday["cost"], yesterday["unpriced"]) == (0, False)
        # The days' total is theirs (extraction), the reranker's cost is in the model table.
        assert page.context["days_cost"] == pytest.approx(2.05)
        content = page.content.decode()
        costs = re.search(r'id="cost-title".*?</table>', content, re.DOTALL)
        assert costs is not None and "2.0500" in costs[0] and "no price set" in costs[0]
        assert "2.1500" in costs[0]  # the total of the priced models
        days = re.search(r'id="usage-title".*?</table>', content, re.DOTALL)
        assert days is not None and "2.1500" not in days[0] and "2.0500" in days[0]

    def test_users_with_equal_tokens_come_most_requests_first(self) -> None:
        # The offline extractor spends no token: the users who asked most come first.
        for _ in range(3):
            self.make_event(user_id="zoe", usage={"calls": 0})
        self.make_event(user_id="adam", usage={"calls": 0})
        self.make_event(user_id=HOSTILE)
        page = self.get(self.rita, "usage")
        assert [u["scope_id"] for u in page.context["users"]] == ["zoe", HOSTILE, "adam"]

    def test_the_events_page_links_to_usage_and_the_nav_names_it(self) -> None:
        page = self.get(self.rita, "events")
        content = page.content.decode()
        assert f'href="{self.url("usage")}"' in content
        assert "Model usage per day" not in content  # moved to the Usage page
        usage = self.get(self.rita, "usage").content.decode()
        assert f'<a href="{self.url("usage")}" aria-current="page">Usage</a>' in usage


def test_prices_are_parsed_and_bad_ones_refused() -> None:
    assert parse_prices("") == {}
    [price] = parse_prices('{"m": {"input": 3, "output": 15}}').values()
    assert price == Price(3.0, 15.0, 3.0, 3.0)  # a cache price left out costs as input
    assert price.cost({"input_tokens": 2_000_000, "output_tokens": 1}) == pytest.approx(6.000015)
    for bad in (
        "not json",
        "[]",
        '{"m": 3}',
        '{"m": {"input": 1}}',
        '{"m": {"input": 1, "output": -1}}',
        '{"m": {"input": 1, "output": "5"}}',
        '{"m": {"input": 1, "output": true}}',
        '{"m": {"input": 1, "output": 5, "per_image": 2}}',
        '{" ": {"input": 1, "output": 5}}',
        '{"m": {"input": 1e999, "output": 5}}',
    ):
        with pytest.raises(ImproperlyConfigured):
            parse_prices(bad)


def test_an_events_usage_records_its_model() -> None:
    first, second = Usage(1, 10, 2, model="claude-haiku-5-5"), Usage(1, 5, 1)
    first.add(second)
    assert first.recorded() == {
        "calls": 2, "input_tokens": 15, "output_tokens": 3,
        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
        "model": "claude-haiku-5-5",
    }  # fmt: skip
    assert Usage.from_counts(first.recorded()).model == "claude-haiku-5-5"
    assert "model" not in Usage(0).recorded()  # the offline extractor: no model
    assert "model" not in first.counts()  # what profiles sum stays numbers
