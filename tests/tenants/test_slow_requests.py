"""Slow requests per key and per project (tenants.throttling.InFlight), against a live server.

A request is made slow for real: another session holds an exclusive lock on the memories'
table, so a list of memories waits for it while the test probes the server with pings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.test import override_settings

from tenants.throttling import IN_FLIGHT
from tests.config.test_deadlines import memories_locked
from tests.factory import auth, make_key
from tests.memory.test_events import wait_for


@pytest.fixture
def api(live_api: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_api, timeout=30) as client:
        yield client


def slow_list(
    api: httpx.Client, key: Any, answers: list[int], slow: bool = True
) -> threading.Thread:
    """A list of memories in a thread of its own (it waits on the lock), once the server has
    admitted it and it has run past ENGRAM_API_SLOW_MS (or, not `slow`, once admitted)."""
    before = len(IN_FLIGHT.started.get(f"key:{key.key.pk}", {}))

    def run() -> None:
        answers.append(api.get("/v1/memories/?user_id=alice", headers=auth(key.raw)).status_code)

    thread = threading.Thread(target=run)
    thread.start()
    admitted = lambda: len(IN_FLIGHT.started.get(f"key:{key.key.pk}", {})) > before  # noqa: E731
    assert wait_for(admitted, seconds=20)
    time.sleep(0.3 if slow else 0)
    return thread


@override_settings(
    ENGRAM_API_SLOW_MS=200,
    ENGRAM_API_SLOW_COOLDOWN_SECONDS=0,
    ENGRAM_API_KEY_SLOW_REQUESTS=1,
    ENGRAM_API_PROJECT_SLOW_REQUESTS=2,
)
def test_slow_requests_are_limited_per_key_and_project_not_for_others(api: httpx.Client) -> None:
    a1, a2, a3 = (make_key("acme", "busy") for _ in range(3))
    other = make_key("globex", "quiet")

    def ping(key: Any) -> httpx.Response:
        return api.get("/v1/ping/", headers=auth(key.raw))

    answers: list[int] = []
    with memories_locked():
        waiting = [slow_list(api, a1, answers)]
        refused = ping(a1)  # the key has its one slow request in flight
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["Retry-After"]) >= 1
        assert "throttled" in refused.json()["detail"]
        assert ping(a2).status_code == 200  # its project has one of its two
        waiting.append(slow_list(api, a2, answers))
        assert ping(a3).status_code == 429  # the project has its two
        assert ping(other).status_code == 200  # another project is not held back
    for thread in waiting:
        thread.join(30)
    assert answers == [200, 200]  # the slow requests themselves were served
    assert ping(a1).status_code == 200  # and once they ended (no cool-down here), a1 again


@override_settings(
    ENGRAM_API_SLOW_MS=200,
    ENGRAM_API_SLOW_COOLDOWN_SECONDS=30,
    ENGRAM_API_KEY_SLOW_REQUESTS=1,
    ENGRAM_API_PROJECT_SLOW_REQUESTS=5,
)
def test_a_refused_key_is_held_to_its_limit_for_the_cool_down(api: httpx.Client) -> None:
    """After a refusal the key may have one request in flight in all, slow or not yet: a burst
    that turns slow only later cannot take every thread again."""
    busy, other = make_key("acme", "burst"), make_key("acme", "burst")
    answers: list[int] = []
    with memories_locked():
        first = slow_list(api, busy, answers)
        assert api.get("/v1/ping/", headers=auth(busy.raw)).status_code == 429
    first.join(30)
    assert api.get("/v1/ping/", headers=auth(busy.raw)).status_code == 200  # none in flight
    with memories_locked():
        second = slow_list(api, busy, answers, slow=False)  # in flight, not slow yet
        assert api.get("/v1/ping/", headers=auth(busy.raw)).status_code == 429
        assert api.get("/v1/ping/", headers=auth(other.raw)).status_code == 200
    second.join(30)
    assert answers == [200, 200]


@override_settings(ENGRAM_API_SLOW_MS=1_000, ENGRAM_API_KEY_SLOW_REQUESTS=1)
def test_fast_requests_of_one_key_are_never_limited(api: httpx.Client) -> None:
    key = make_key("acme", "fast")
    answers: list[int] = []

    def pings() -> None:
        answers.extend(api.get("/v1/ping/", headers=auth(key.raw)).status_code for _ in range(10))

    threads = [threading.Thread(target=pings) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert answers == [200] * 80
