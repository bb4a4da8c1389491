"""Request limits per API key (DRF throttling; 429 with Retry-After when exceeded): a rate per
key, and how many slow requests a key and a project may have in flight in a web process."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

from tenants.models import ApiKey


class ApiKeyRateThrottle(SimpleRateThrottle):
    """ENGRAM_API_RATE requests per API key, counted in this web process's cache.

    Requests without a valid key never get this far (authentication refuses them first).
    """

    scope = "api_key"

    def get_rate(self) -> str | None:
        # Read when the request comes (DRF reads it once, at import), so settings overrides hold.
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        return str(rate) if rate else None

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not isinstance(request.auth, ApiKey):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class InFlight:
    """The API requests this web process is serving now, by key and by project: what
    SlowRequestThrottle admits by.

    A request is slow once it has run past ENGRAM_API_SLOW_MS. A key may have at most
    ENGRAM_API_KEY_SLOW_REQUESTS slow requests in flight here, a project
    ENGRAM_API_PROJECT_SLOW_REQUESTS: a request that finds its key (or project) there is refused,
    and the key (or project) is then held for ENGRAM_API_SLOW_COOLDOWN_SECONDS, during which it
    may have no more requests in flight in all, slow or not yet, so that a burst of requests
    that only turn slow later cannot take every thread again. Fast requests are never limited:
    one application's key may have as many in flight as the server has threads.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: dict[str, dict[int, float]] = defaultdict(dict)  # who -> {token: start}
        self.held_until: dict[str, float] = {}
        self.tokens = itertools.count()

    def admit(self, limits: list[tuple[str, int]], now: float) -> int | None:
        """A token for a new request of each `who` (key, project) within its limit, or None."""
        slow_after = settings.ENGRAM_API_SLOW_MS / 1000
        with self.lock:
            for who, limit in limits:
                running = self.started.get(who, {})
                slow = sum(now - began > slow_after for began in running.values())
                held = self.held_until.get(who, 0.0) > now
                if slow >= limit or (held and len(running) >= limit):
                    self.held_until[who] = now + settings.ENGRAM_API_SLOW_COOLDOWN_SECONDS
                    return None
            token = next(self.tokens)
            for who, _ in limits:
                self.started[who][token] = now
            return token

    def done(self, whos: list[str], token: int, now: float) -> None:
        with self.lock:
            for who in whos:
                running = self.started.get(who, {})
                running.pop(token, None)
                if not running:
                    self.started.pop(who, None)
            for who in [w for w, until in self.held_until.items() if until <= now]:
                del self.held_until[who]


IN_FLIGHT = InFlight()


class SlowRequestThrottle(BaseThrottle):
    """429 for a request of a key (or project) that already has its share of this process's
    threads in slow requests (InFlight), so one tenant's slow requests cannot hold them all.
    The request's slot is given back by InFlightMiddleware when its response is ready."""

    def allow_request(self, request: Request, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey) or hasattr(request._request, "engram_in_flight"):
            return True
        limits = [
            (f"key:{key.pk}", settings.ENGRAM_API_KEY_SLOW_REQUESTS),
            (f"project:{key.project_id}", settings.ENGRAM_API_PROJECT_SLOW_REQUESTS),
        ]
        token = IN_FLIGHT.admit(limits, time.monotonic())
        if token is None:
            return False
        request._request.engram_in_flight = ([who for who, _ in limits], token)  # type: ignore[attr-defined]
        return True

    def wait(self) -> float:
        return float(max(1, settings.ENGRAM_API_SLOW_MS // 1000))


class InFlightMiddleware:
    """Gives back the request's slot in IN_FLIGHT (SlowRequestThrottle) once it is answered."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            return self.get_response(request)
        finally:
            held = getattr(request, "engram_in_flight", None)
            if held is not None:
                IN_FLIGHT.done(held[0], held[1], time.monotonic())
