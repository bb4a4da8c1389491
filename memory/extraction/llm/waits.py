"""How long a model API asks to be left alone, and which of its refusals are final, for every
provider's SDK.

Both SDKs (anthropic, openai) wait as long as a Retry-After header asks, without a bound, and
both honour the `x-should-retry` header: `no_long_retry_waits` is an httpx response hook that
makes them give up instead of sleeping through a long wait in a worker; the event's own retry
waits for it (`requested_wait`, extraction.pipeline.backoff).

May import nothing of engram: the responses are the SDKs' own (httpx's for anthropic, httpx2's
for openai), read through the attributes both have.
"""

from __future__ import annotations

import email.utils
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from typing import Protocol

# Within one attempt a worker waits at most this long (the lease is sized for it); a longer
# wait is left to the event's own retry with backoff, so no worker thread sleeps for an hour.
MAX_RETRY_AFTER_SECONDS = 8.0


class Response(Protocol):
    """An HTTP response of either SDK's HTTP client (httpx.Response, httpx2.Response)."""

    @property
    def headers(self) -> MutableMapping[str, str]: ...


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """What the server asks to wait (Retry-After-Ms, Retry-After in seconds or as a date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers[name]) * scale
        except (KeyError, ValueError):
            continue
    try:
        when = email.utils.parsedate_to_datetime(headers["retry-after"])
    except (KeyError, TypeError, ValueError):
        return None
    return (when - datetime.now(tz=when.tzinfo or UTC)).total_seconds()


def no_long_retry_waits(response: Response) -> None:
    """httpx response hook: a response asking for a long wait is not retried by the SDK."""
    wait = retry_after_seconds(response.headers)
    if wait is not None and wait > MAX_RETRY_AFTER_SECONDS:
        response.headers["x-should-retry"] = "false"


def requested_wait(failure: BaseException) -> float | None:
    """Seconds the model API asked a failed call to wait (Retry-After on a 429 or 5xx), if
    `failure` is an SDK's error status (its `response`); the event's next attempt comes no
    sooner (extraction.pipeline)."""
    response = getattr(failure, "response", None)
    status = getattr(response, "status_code", None)
    if not isinstance(status, int) or status < 400:
        return None
    return retry_after_seconds(response.headers)  # type: ignore[union-attr]


# What a model API answers a request it will never accept as it stands (a malformed or too large
# request: 400, 422); a key, model or endpoint the operator may still fix (401, 403, 404) and
# everything else are retried.
REFUSED_FOR_GOOD = frozenset({400, 422})


def refused_for_good(failure: BaseException) -> bool:
    """Whether `failure` is a model API's refusal of the request itself (see above)."""
    status = getattr(getattr(failure, "response", None), "status_code", None)
    return status in REFUSED_FOR_GOOD
