"""The API's request transaction, and one access-log row per API request.

For API paths this middleware owns the request's transaction (instead of ATOMIC_REQUESTS):
authentication sets the tenant inside it, the view runs inside it, and for a successful
request the access-log row is written inside it too, so the row commits together with the
change it records, at no extra round trips. A failed request (status >= 400) is rolled back
whole, and its row is then written in a transaction of its own.

What a row stores is sanitised so that the insert cannot fail on the request's own content:
NUL characters are dropped, lone surrogates become U+FFFD, and every string is cut to its
column (scope values to SCOPE_VALUE_CHARS, at most SCOPE_VALUES per scope key). A request
without a project (no key, a bad or revoked one) keeps the route it matched instead of its
path, and no scope: its row is operator telemetry and must not carry a tenant's user ids.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django.utils import timezone

from audit.access import access_record
from audit.models import AccessLog
from config.middleware import client_address, current_client_request_id, current_request_id
from tenants.db import project_context
from tenants.models import KEY_PREFIX_LENGTH, ApiKey

logger = logging.getLogger(__name__)

API_PREFIXES = ("/v1/", "/v2/", "/v3/", "/api/v1/")
SCOPE_VALUE_CHARS = 200
SCOPE_VALUES = 20
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(value: object, limit: int) -> str:
    """`value` as text PostgreSQL can store, at most `limit` characters."""
    return _SURROGATE.sub("\ufffd", str(value).replace("\x00", ""))[:limit]


def clean_scope(scope: dict[str, Any]) -> dict[str, Any]:
    cleaned: dict[str, Any] = {}
    for key, value in scope.items():
        if isinstance(value, list | tuple):
            cleaned[key] = [clean_text(item, SCOPE_VALUE_CHARS) for item in value[:SCOPE_VALUES]]
        else:
            cleaned[key] = clean_text(value, SCOPE_VALUE_CHARS)
    return cleaned


def _route(request: HttpRequest) -> str | None:
    """The URL pattern the path matches ("/v2/entities/<str:entity_type>/<str:name>/")."""
    match = request.resolver_match
    if match is None:  # refused by a middleware before the URL was resolved
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return None
    return "/" + match.route


class AccessLogMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(API_PREFIXES):
            return self.get_response(request)
        started = time.perf_counter()
        with transaction.atomic():
            response = self.get_response(request)
            if response.status_code < 400:
                self._record(request, response, started)
                return response
            transaction.set_rollback(True)
        try:
            key = access_record(request).api_key
            with project_context(key.project_id if key is not None else None):
                self._record(request, response, started)
        except DatabaseError:
            # Nothing of the request was kept; failing its (error) response now would only hide
            # what went wrong. The failure is logged loudly, with the request id.
            logger.exception("access log write failed")
        return response

    def _record(self, request: HttpRequest, response: HttpResponse, started: float) -> None:
        record = access_record(request)
        key = record.api_key
        match = request.resolver_match
        path = request.path
        if key is None:
            path = _route(request) or path
        AccessLog.objects.create(
            project_id=key.project_id if key else None,
            api_key_id=key.pk if key else None,
            key_prefix=clean_text(record.key_prefix, KEY_PREFIX_LENGTH),
            client_address=client_address(request),
            request_id=current_request_id(),
            client_request_id=current_client_request_id(),
            method=clean_text(request.method or "", 10),
            path=clean_text(path, 500),
            action=clean_text((match.url_name or "") if match else "", 100),
            scope=clean_scope(record.scope) if key else {},
            result_count=record.result_count,
            status=response.status_code,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        if key is not None:
            now = timezone.now()
            stale = now - timedelta(seconds=settings.ENGRAM_KEY_LAST_USED_RESOLUTION_SECONDS)
            if key.last_used_at is None or key.last_used_at < stale:
                ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
