"""Time-aware search (issue #14): `reference_date` and the time window a query names.

The parser is pure (memory.text.temporal); through the API, a query about "last month"
relative to a given reference date ranks that month's memory first, and a window no memory falls
in changes nothing."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memory.text.temporal import reference_moment, time_window
from tests.base import BaseTestCase
from tests.factory import auth

NOW = datetime(2023, 6, 15, 10, 0, tzinfo=UTC)  # a Thursday


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("What did I do last week?", date(2023, 6, 5), date(2023, 6, 12)),
        ("what happened yesterday", date(2023, 6, 14), date(2023, 6, 15)),
        ("anything today?", date(2023, 6, 15), date(2023, 6, 16)),
        ("What did Caroline do in May 2023?", date(2023, 5, 1), date(2023, 6, 1)),
        ("where did we go in May", date(2023, 5, 1), date(2023, 6, 1)),
        ("where did we go in July", date(2022, 7, 1), date(2022, 8, 1)),
        ("plans for this month", date(2023, 6, 1), date(2023, 7, 1)),
        ("what did we eat 3 days ago", date(2023, 6, 12), date(2023, 6, 13)),
        ("two weeks ago", date(2023, 5, 29), date(2023, 6, 5)),
        ("in the past 10 days", date(2023, 6, 5), date(2023, 6, 15)),
        ("last month", date(2023, 5, 1), date(2023, 6, 1)),
        ("what was new in 2022", date(2022, 1, 1), date(2023, 1, 1)),
        ("on 7 May 2023", date(2023, 5, 7), date(2023, 5, 8)),
        ("May 7th, 2023", date(2023, 5, 7), date(2023, 5, 8)),
        ("the 2023-05-07 meeting", date(2023, 5, 7), date(2023, 5, 8)),
        ("last Monday", date(2023, 6, 12), date(2023, 6, 13)),
        ("on Friday", date(2023, 6, 9), date(2023, 6, 10)),
        ("before May 2023", date(1, 1, 2), date(2023, 5, 1)),
        ("since 2022", date(2022, 1, 1), date(9999, 12, 30)),
        ("last year", date(2022, 1, 1), date(2023, 1, 1)),
    ],
)
def test_it_finds_the_window_a_query_names(query: str, start: date, end: date) -> None:
    window = time_window(query, NOW)
    assert window is not None, query
    assert (window.start.date(), window.end.date()) == (start, end)
    assert window.phrase.lower() in query.lower()


@pytest.mark.parametrize(
    "query",
    ["When did Caroline go to the support group?", "before she moved", "on 31 February 2023", ""],
)
def test_no_window_without_a_time_expression(query: str) -> None:
    assert time_window(query, NOW) is None


def test_the_past_week_runs_up_to_now() -> None:
    window = time_window("what did I read in the past week", NOW)
    assert window is not None and NOW in window and datetime(2023, 6, 8, 11, tzinfo=UTC) in window
    assert datetime(2023, 6, 8, 9, tzinfo=UTC) not in window


@given(st.text(max_size=300))
@example("last week")
@example("3 years ago")
@example("since 2022")
def test_any_text_parses_or_not_without_error(query: str) -> None:
    for now in (NOW, datetime(1, 1, 3, tzinfo=UTC), datetime(9999, 12, 31, 23, tzinfo=UTC)):
        window = time_window(query, now)
        assert window is None or window.start < window.end


def test_reference_dates_as_mem0_sends_them() -> None:
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert reference_moment(int(when.timestamp())) == when
    assert reference_moment(when.timestamp()) == when
    assert reference_moment("2023-05-08") == datetime(2023, 5, 8, tzinfo=UTC)
    assert reference_moment("2023-05-08T13:56:00") == when
    assert reference_moment("2023-05-08T13:56:00Z") == when
    for bad in (True, "yesterday", "2023-13-01", 1e20, float("nan"), "", [2023], None):
        with pytest.raises(ValueError, match=r"epoch|expected"):
            reference_moment(bad)


class TemporalSearchTestCase(BaseTestCase):
    MONTHS = {
        "I went hiking in the Alps with Tom": datetime(2023, 3, 12, tzinfo=UTC),
        "I went hiking in the Dolomites with Ana": datetime(2023, 5, 20, tzinfo=UTC),
        "I went hiking in the Pyrenees with Joe": datetime(2023, 6, 10, tzinfo=UTC),
    }

    def setUp(self) -> None:
        for text, when in self.MONTHS.items():
            body = {
                "messages": [{"role": "user", "content": text}],
                "user_id": "alice",
                "infer": False,
                "timestamp": int(when.timestamp()),
            }
            response = self.client.post(
                "/v3/memories/add/", body, content_type="application/json",
                headers=auth(self.alice.raw),
            )  # fmt: skip
            assert response.status_code == 200, response.content

    def search(self, **body: Any) -> Any:
        return self.client.post(
            "/v3/memories/search/",
            {"filters": {"user_id": "alice"}, "threshold": 0, **body},
            content_type="application/json",
            headers=auth(self.alice.raw),
        )

    def ranked(self, **body: Any) -> list[str]:
        response = self.search(**body)
        assert response.status_code == 200, response.content
        return [r["memory"] for r in response.json()["results"]]

    def test_last_month_relative_to_the_reference_date_ranks_that_month_first(self) -> None:
        query = "Where did I go hiking last month?"
        assert self.ranked(query=query, reference_date="2023-06-15")[0].endswith("Ana")
        assert self.ranked(query=query, reference_date="2023-04-02T09:00:00Z")[0].endswith("Tom")
        june = int(datetime(2023, 7, 3, tzinfo=UTC).timestamp())
        assert self.ranked(query=query, reference_date=june)[0].endswith("Joe")

    def test_a_named_month_ranks_first_without_a_reference_date(self) -> None:
        assert self.ranked(query="Where did I go hiking in March 2023?")[0].endswith("Tom")

    def test_a_window_no_memory_falls_in_changes_nothing(self) -> None:
        plain = self.search(query="Where did I go hiking?").json()["results"]
        dated = self.search(query="Where did I go hiking?", reference_date="2030-01-01")
        assert dated.json()["results"] == plain
        nowhere = self.search(query="Where did I go hiking in 1999?").json()["results"]
        assert {r["memory"] for r in nowhere} == {r["memory"] for r in plain}

    def test_a_bad_reference_date_is_a_400_naming_it(self) -> None:
        for bad in ("next tuesday", True, [1], {"a": 1}, "9999999-01-01", 10**30):
            response = self.search(query="hiking", reference_date=bad)
            assert response.status_code == 400, (bad, response.content)
            assert response.json()["detail"].startswith("reference_date"), response.json()
