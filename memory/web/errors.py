"""The site's error pages, the CSRF failure page and /favicon.ico.

Django's error handlers (config/urls.py: handler400, 403, 404, 500) and the CSRF failure view
(settings.CSRF_FAILURE_VIEW) all come here, and is_page_request alone decides how to answer:
a path under PAGE_ROOTS (the operator dashboard, the end-user pages, Django's admin: the HTML
pages) gets a page in the dashboards' style (templates/web/error.html) with a sentence saying
what happened and a link back; every other path is the API's and keeps its JSON error
(config.exceptions) exactly.

The pages are rendered without the request: no context processor runs, so no session, user or
database is read (a 500 or a database outage still gets its page) and no flash message is
consumed by an error. They are never cached: an end user's link back holds their token.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_safe

from config.exceptions import (
    database_refusal,
    json_bad_request,
    json_csrf_failure,
    json_forbidden,
    json_not_found,
    json_server_error,
)
from config.middleware import current_request_id

# Where the HTML pages live: memory/web/urls.py (the operator dashboard, the end-user pages) and
# Django's admin (config/urls.py). Compared with the path after any script prefix.
DASHBOARD_ROOT = "/dashboard/"
ENDUSER_ROOT = "/me/"
ADMIN_ROOT = "/admin/"
PAGE_ROOTS = (DASHBOARD_ROOT, ENDUSER_ROOT, ADMIN_ROOT)
TEMPLATE = "web/error.html"


def is_page_request(request: HttpRequest) -> bool:
    """Whether the request is for an HTML page (under PAGE_ROOTS) rather than for the API."""
    return request.path_info.startswith(PAGE_ROOTS)


@dataclass(frozen=True)
class Link:
    url: str
    label: str


def way_back(request: HttpRequest) -> Link | None:
    """The start of the section the request was in; for an end user, their own page (the
    token is the first segment under /me/), or None when the path has no token."""
    path = request.path_info
    if path.startswith(ADMIN_ROOT):
        return Link(reverse("admin:index"), "Back to the admin")
    if path.startswith(ENDUSER_ROOT):
        token = path[len(ENDUSER_ROOT) :].split("/", 1)[0]
        if not token:
            return None
        return Link(reverse("web:enduser_home", kwargs={"token": token}), "Back to your memories")
    return Link(reverse("web:home"), "Back to the dashboard")


def _came_from(request: HttpRequest) -> str | None:
    """The page a refused form was sent from (its Referer, if on this site), to reload it."""
    referer = request.headers.get("Referer", "")
    if not url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return None
    parts = urlsplit(referer)
    return urlunsplit(("", "", parts.path or "/", parts.query, ""))


def _page(
    request: HttpRequest,
    status: int,
    title: str,
    sentence: str,
    *,
    hint: str = "",
    reload: str | None = None,
) -> HttpResponse:
    context = {
        "status": status,
        "title": title,
        "sentence": sentence,
        "hint": hint,
        "reload": reload,
        "back": way_back(request),
        # For a server error, the id its log lines carry (config.middleware): what to quote.
        "reference": current_request_id() if status >= 500 else "",
    }
    response = HttpResponse(render_to_string(TEMPLATE, context), status=status)
    response["Cache-Control"] = "no-store"
    return response


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if not is_page_request(request):
        return json_bad_request(request, exception)
    return _page(request, 400, "Bad request", "The server could not understand this request.")


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if not is_page_request(request):
        return json_forbidden(request, exception)
    # Our own refusals say why in a sentence (memory.web.common: a reader's change).
    return _page(
        request, 403, "Not allowed", "You are not allowed to do this.", hint=str(exception or "")
    )


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if not is_page_request(request):
        return json_not_found(request, exception)
    return _page(
        request,
        404,
        "Page not found",
        "There is no page at this address, or it is not one you may see.",
    )


def server_error(request: HttpRequest) -> HttpResponse:
    if not is_page_request(request):
        return json_server_error(request)
    # Called inside Django's `except` block: a database outage is a 503 to retry, as in the API.
    refusal = database_refusal(sys.exc_info()[1] or Exception())
    if refusal is not None:
        response = _page(request, 503, "Try again in a moment", refusal.detail)
        response["Retry-After"] = refusal.retry_after
        return response
    return _page(
        request,
        500,
        "Something went wrong",
        "The server failed to show this page. The error has been logged; try again later.",
    )


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """settings.CSRF_FAILURE_VIEW: a form refused because its CSRF token or cookie was missing
    or stale (the page was open too long, or cookies are blocked). Django has logged `reason`;
    the page never shows it."""
    if not is_page_request(request):
        return json_csrf_failure(request, reason)
    return _page(
        request,
        403,
        "This page has expired",
        "The form could not be sent: the page was open too long, "
        "or your browser did not send this site's cookie.",
        hint="Reload the page and send the form again. "
        "If this happens again, allow cookies for this site.",
        reload=_came_from(request),
    )


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, which browsers ask for on every site: a redirect to the icon among the
    static files, which WhiteNoise serves and caches like the stylesheet (in production under a
    name with its hash). 302, not 301: a new icon has a new name."""
    response = HttpResponseRedirect(static("engram/favicon.ico"))
    response["Cache-Control"] = "public, max-age=86400"
    return response
