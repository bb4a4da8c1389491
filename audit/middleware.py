"""The API's request transaction, and one access-log row per API request.

For API paths this middleware owns the request's transaction (instead of ATOMIC_REQUESTS):
authentication sets the tenant inside it, the view runs inside it, and for a successful
request the access-log row is written inside it too, so the row commits together with the
change it records, at no extra round trips. A failed request (status >= 400) is rolled back
whole, and its row is then written in a transaction of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from audit.access import access_record
from audit.models import AccessLog
from config.middleware import current_request_id
from tenants.db import project_context
from tenants.models import ApiKey

logger = logging.getLogger(__name__)

API_PREFIXES = ("/v1/", "/v2/", "/v3/", "/api/v1/")


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
        AccessLog.objects.create(
            project_id=key.project_id if key else None,
            api_key_id=key.pk if key else None,
            request_id=current_request_id(),
            method=request.method or "",
            path=request.path[:500],
            action=(match.url_name or "") if match else "",
            scope=record.scope,
            result_count=record.result_count,
            status=response.status_code,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        if key is not None:
            now = timezone.now()
            stale = now - timedelta(seconds=settings.ENGRAM_KEY_LAST_USED_RESOLUTION_SECONDS)
            if key.last_used_at is None or key.last_used_at < stale:
                ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
