"""Failed logins limited per account and client address, for every login form: the admin's and
the operator dashboard's (memory/web/views.py).

Counted as django-axes counts with its `[["username", "ip_address"]]` lockout parameters: one
count per (account, address) pair, so a person who mistypes their password, or an attacker
guessing one account's, locks only that account from that address, and every other operator
behind the same office address or proxy still logs in. After ENGRAM_ADMIN_LOGIN_ATTEMPTS failed
logins of one account from one address within WINDOW_SECONDS, on either form, that account is
refused from that address (429, Retry-After) until the window has passed, without checking the
password, so it cannot be guessed by brute force through one form or by alternating them. One
address that fails ENGRAM_LOGIN_ADDRESS_ATTEMPTS times in the window, whatever the accounts
(a password spray), is refused for every account. The refusal is the dashboards' styled page.
Counted in each web process's cache (as the API's rate limits); the account name is counted as
a hash, never stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from config.middleware import client_address

WINDOW_SECONDS = 15 * 60

LoginView = Callable[..., HttpResponse]


def limit_failed_logins(view: LoginView) -> LoginView:
    """Wrap a login view (Django's LoginView or one built on it) with the shared limits."""

    @wraps(view)
    def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method != "POST":
            return view(request, *args, **kwargs)
        # The address the trusted proxies saw (ENGRAM_TRUSTED_PROXY_HOPS), as in the access log.
        address = client_address(request) or "unknown"
        account = hashlib.sha256(
            str(request.POST.get("username", "")).strip().casefold().encode()
        ).hexdigest()[:32]
        pair = f"engram:login-failures:{address}:{account}"
        spray = f"engram:login-failures:{address}"
        if cache.get(pair, 0) >= settings.ENGRAM_ADMIN_LOGIN_ATTEMPTS:
            return _locked_out(request, "this account from this address")
        if cache.get(spray, 0) >= settings.ENGRAM_LOGIN_ADDRESS_ATTEMPTS:
            return _locked_out(request, "this address")
        response = view(request, *args, **kwargs)
        # A successful login redirects; a failed one shows the form again.
        if response.status_code == 200:
            _count(pair)
            _count(spray)
        return response

    return limited


def _count(counter: str) -> None:
    cache.add(counter, 0, WINDOW_SECONDS)
    try:
        cache.incr(counter)
    except ValueError:  # expired between add and incr
        cache.set(counter, 1, WINDOW_SECONDS)


def _locked_out(request: HttpRequest, who: str) -> HttpResponse:
    """The dashboards' error page (templates/web/error.html), 429 with Retry-After."""
    minutes = WINDOW_SECONDS // 60
    context = {
        "status": 429,
        "title": "Too many failed logins",
        "sentence": f"Too many failed logins for {who}: try again in {minutes} minutes.",
        "hint": "Other accounts can still log in from here. If you forgot your password, ask "
        "an administrator of this server to set a new one.",
        "reload": request.path,
        "back": None,
        "reference": "",
    }
    response = HttpResponse(render_to_string("web/error.html", context), status=429)
    response["Retry-After"] = str(WINDOW_SECONDS)
    response["Cache-Control"] = "no-store"
    return response
