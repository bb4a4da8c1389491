"""One access-log row per API (and MCP) request, for the requests whose view did not write it.

This middleware only records; it owns no transaction. A view does its database work in one
tenant transaction (memory.api.common.tenant) that writes the row before committing, so the
row commits together with the change it records. Every other request — refused before its
view (bad key, throttled, bad input in the URL, an oversized body), failed inside it (rolled
back whole), or one that needed no tenant transaction (ping) — gets its row here, after the
response, in a transaction of its own.

What a row stores is sanitised so that the insert cannot fail on the request's own content:
NUL characters are dropped, lone surrogates become U+FFFD, and every string is cut to its
column (scope values to SCOPE_VALUE_CHARS, at most SCOPE_VALUES per scope key). A request
without a project (no key, a bad or revoked one) keeps the route it matched instead of its
path, and no scope: its row is operator telemetry and must not carry a tenant's user ids.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse

from audit.access import access_record, authenticated_key, write_row
from tenants.db import project_context

logger = logging.getLogger(__name__)

API_PREFIXES = ("/v1/", "/v2/", "/v3/", "/api/v1/", "/mcp/")
# The MCP endpoint's other spelling (memory/mcp/urls.py); its view writes the rows it can.
API_PATHS = ("/mcp",)


class AccessLogMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not (request.path.startswith(API_PREFIXES) or request.path in API_PATHS):
            return self.get_response(request)
        record = access_record(request)
        record.started = time.perf_counter()
        response = self.get_response(request)
        if record.logged == response.status_code:
            return response  # written by the view's tenant transaction, with this status
        try:
            key = authenticated_key(request)
            with project_context(key.project_id if key is not None else None):
                write_row(request, response.status_code)
        except DatabaseError:
            # Nothing of the request was kept; failing its (error) response now would only hide
            # what went wrong. The failure is logged loudly, with the request id.
            logger.exception("access log write failed")
        return response
