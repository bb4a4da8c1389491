"""Request rate limits per API key (DRF throttling; 429 with Retry-After when exceeded)."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

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
