"""config.outbound: one deadline for the whole exchange, against a real receiver that drips."""

from __future__ import annotations

import time

import httpx
import pytest

from config.outbound import deadline_client
from tests.webhooks.receiver import receiving


def test_a_receiver_that_drips_its_answer_is_cut_off_at_the_deadline() -> None:
    # 41 bytes, one every 0.2 s: each read waits 0.2 s, far under any read timeout, and the
    # whole answer takes 8 s; the exchange's deadline is 1 s.
    with receiving("drip", delay=0.2) as receiver, deadline_client(1) as client:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout, match="deadline of 1 s"):
            client.post(receiver.url, content=b"{}")
        took = time.monotonic() - started
    print(f"cut off after {took:.2f} s")


def test_an_answer_within_the_deadline_is_read_whole() -> None:
    with receiving("drip", delay=0.01) as receiver, deadline_client(5) as client:
        response = client.post(receiver.url, content=b"{}")
    assert (response.status_code, response.text) == (200, "ok")
    assert [r.body for r in receiver.requests] == [b"{}"]


def test_a_second_exchange_needs_a_client_of_its_own() -> None:
    with receiving() as receiver, deadline_client(0.5) as client:
        assert client.post(receiver.url, content=b"{}").status_code == 204
        time.sleep(0.6)
        with pytest.raises(httpx.TimeoutException):
            client.post(receiver.url, content=b"{}")
