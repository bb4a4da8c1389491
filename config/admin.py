"""engram's admin site: Django's, with failed logins limited per client address.

After ENGRAM_ADMIN_LOGIN_ATTEMPTS failed logins from one address within WINDOW_SECONDS, the
login form answers 429 (with Retry-After) until the window has passed, without checking the
password, so it cannot be guessed by brute force. Counted in each web process's cache.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

from config.middleware import client_address

WINDOW_SECONDS = 15 * 60


class EngramAdminSite(admin.AdminSite):
    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        # The address the trusted proxies saw (ENGRAM_TRUSTED_PROXY_HOPS), as in the access log.
        counter = f"engram:admin-login-failures:{client_address(request) or 'unknown'}"
        if (
            request.method == "POST"
            and cache.get(counter, 0) >= settings.ENGRAM_ADMIN_LOGIN_ATTEMPTS
        ):
            response = HttpResponse(
                "Too many failed logins from this address; try again later.",
                status=429,
                content_type="text/plain; charset=utf-8",
            )
            response["Retry-After"] = str(WINDOW_SECONDS)
            return response
        response = super().login(request, extra_context)
        # A successful login redirects; a failed one shows the form again.
        if request.method == "POST" and response.status_code == 200:
            cache.add(counter, 0, WINDOW_SECONDS)
            try:
                cache.incr(counter)
            except ValueError:  # expired between add and incr
                cache.set(counter, 1, WINDOW_SECONDS)
        return response
