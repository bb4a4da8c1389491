"""Failed logins limited per client address, for every login form: the admin's and the
operator dashboard's (memory/web/views.py).

After ENGRAM_ADMIN_LOGIN_ATTEMPTS failed logins from one address within WINDOW_SECONDS, on
either form, both answer 429 (with Retry-After) until the window has passed, without checking
the password, so it cannot be guessed by brute force through one form or by alternating them.
Counted in each web process's cache.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

from config.middleware import client_address

WINDOW_SECONDS = 15 * 60

LoginView = Callable[..., HttpResponse]


def limit_failed_logins(view: LoginView) -> LoginView:
    """Wrap a login view (Django's LoginView or one built on it) with the shared limit."""

    @wraps(view)
    def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        # The address the trusted proxies saw (ENGRAM_TRUSTED_PROXY_HOPS), as in the access log.
        counter = f"engram:login-failures:{client_address(request) or 'unknown'}"
        posted = request.method == "POST"
        if posted and cache.get(counter, 0) >= settings.ENGRAM_ADMIN_LOGIN_ATTEMPTS:
            return _locked_out()
        response = view(request, *args, **kwargs)
        # A successful login redirects; a failed one shows the form again.
        if posted and response.status_code == 200:
            cache.add(counter, 0, WINDOW_SECONDS)
            try:
                cache.incr(counter)
            except ValueError:  # expired between add and incr
                cache.set(counter, 1, WINDOW_SECONDS)
        return response

    return limited


def _locked_out() -> HttpResponse:
    response = HttpResponse(
        "Too many failed logins from this address; try again later "
        f"(the limit lifts within {WINDOW_SECONDS // 60} minutes).",
        status=429,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(WINDOW_SECONDS)
    return response
