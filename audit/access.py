"""One access-log row per API request: what the request tells it, and writing the row.

Authentication leaves the key on the request (and the presented key's prefix, even when it
fails: tenants.authentication); API views add scope and count with `note_access`. The row is
written once: by the view's tenant transaction just before it commits (`log_request`, so the
row commits together with the change it records), or else by the access-log middleware after
the response, in a transaction of its own (failed requests, which were rolled back, and
requests that opened no tenant transaction).

What a row stores is sanitised so that the insert cannot fail on the request's own content:
NUL characters are dropped, lone surrogates become U+FFFD, and every string is cut to its
column (scope values to SCOPE_VALUE_CHARS, at most SCOPE_VALUES per scope key; the client's
identity headers, CLIENT_HEADERS, to CLIENT_HEADER_CHARS each, any other header ignored); an
end-user dashboard token in the path is redacted, as in every log (config.redaction). A request
without a project (no key, a bad or revoked one) keeps the route it matched instead of its
path, and no scope: its row is operator telemetry and must not carry a tenant's user ids.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import connection
from django.http import HttpRequest
from django.urls import Resolver404, resolve
from django.utils import timezone
from rest_framework.request import Request

from audit.models import AccessLog
from config.middleware import client_address, current_client_request_id, current_request_id
from config.redaction import redact
from tenants.authentication import KEY_ATTRIBUTE, PREFIX_ATTRIBUTE
from tenants.models import KEY_PREFIX_LENGTH, ApiKey

SCOPE_KEYS = ("user_id", "agent_id", "app_id", "run_id")
_ATTRIBUTE = "_engram_access"
# An API key's last_used_at is refreshed at most this often, so reads do not write every time.
KEY_LAST_USED_RESOLUTION_SECONDS = 60


@dataclass
class AccessRecord:
    scope: dict[str, Any] = field(default_factory=dict)
    result_count: int | None = None
    started: float = field(default_factory=time.perf_counter)
    # The status of the row a view's tenant transaction wrote, if it wrote one (the MCP view:
    # the status of the response its row was written for). Should the response end otherwise
    # (an error after the commit), the middleware adds a row for that.
    logged: int | None = None
    # What the row's action column says instead of the URL pattern's name, for an endpoint
    # that carries several operations (the MCP endpoint: its method or tool, memory.mcp).
    action: str = ""


def access_record(request: Request | HttpRequest) -> AccessRecord:
    django_request = request._request if isinstance(request, Request) else request
    record: AccessRecord | None = django_request.__dict__.get(_ATTRIBUTE)
    if record is None:
        record = django_request.__dict__[_ATTRIBUTE] = AccessRecord()
    return record


def authenticated_key(request: Request | HttpRequest) -> ApiKey | None:
    """The key the request authenticated with (tenants.authentication leaves it there)."""
    django_request = request._request if isinstance(request, Request) else request
    key: ApiKey | None = django_request.__dict__.get(KEY_ATTRIBUTE)
    return key


def note_access(
    request: Request | HttpRequest,
    *,
    scope: Mapping[str, Any] | None = None,
    result_count: int | None = None,
) -> None:
    record = access_record(request)
    if scope is not None:
        record.scope = {key: value for key, value in scope.items() if key in SCOPE_KEYS and value}
    if result_count is not None:
        record.result_count = result_count


SCOPE_VALUE_CHARS = 200
SCOPE_VALUES = 20
# The headers by which current Mem0 clients name themselves (mem0ai >= 2.1 and its CLI):
# recorded as sent, never required. Any other header is not kept.
CLIENT_HEADERS = (
    "X-Mem0-Source",
    "X-Application",
    "X-Mem0-Client",
    "X-Mem0-Client-Language",
    "X-Mem0-Client-Version",
    "X-Mem0-Caller-Type",
)
CLIENT_HEADER_CHARS = 200
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


def client_headers(request: HttpRequest) -> dict[str, str]:
    """The client-identity headers the request carried ({header: value}), sanitised and cut to
    CLIENT_HEADER_CHARS each. Not tenant data: kept on unauthenticated rows too."""
    found = {}
    for name in CLIENT_HEADERS:
        value = request.headers.get(name)
        if value is not None:
            found[name] = clean_text(value, CLIENT_HEADER_CHARS)
    return found


def _route(request: HttpRequest) -> str | None:
    """The URL pattern the path matches ("/v2/entities/<str:entity_type>/<scope:name>/")."""
    match = request.resolver_match
    if match is None:  # refused by a middleware before the URL was resolved
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return None
    return "/" + match.route


def log_request(request: Request | HttpRequest, status: int = 200) -> None:
    """Write the request's row now, inside the caller's transaction (see the module doc)."""
    write_row(request, status)
    access_record(request).logged = status


# Every column of the row, in the model's order, and the INSERT that writes them: every request
# writes one row, and the ORM's save path (a model instance, its signals, the INSERT compiled
# each time) took 0.55 ms where this statement with the fields' own conversions takes 0.40 (p50,
# alternating in one process, 2026-11-27).
_FIELDS = AccessLog._meta.concrete_fields
_INSERT = "INSERT INTO {} ({}) VALUES ({})".format(  # noqa: S608 (the model's own names)
    connection.ops.quote_name(AccessLog._meta.db_table),
    ", ".join(connection.ops.quote_name(f.column) for f in _FIELDS),
    ", ".join(["%s"] * len(_FIELDS)),
)


def _insert(**values: Any) -> None:
    """One AccessLog row of `values` (every field, by attname), on the default connection."""
    params = [f.get_db_prep_save(values[f.attname], connection) for f in _FIELDS]
    with connection.cursor() as cursor:
        cursor.execute(_INSERT, params)


def write_row(request: Request | HttpRequest, status: int) -> None:
    """Insert the request's access-log row (in the current transaction and tenant)."""
    if isinstance(request, Request):
        request = request._request
    record = access_record(request)
    key = authenticated_key(request)
    match = request.resolver_match
    path = request.path
    if key is None:
        path = _route(request) or path
    _insert(
        id=uuid.uuid4(),
        project_id=key.project_id if key else None,
        api_key_id=key.pk if key else None,
        key_prefix=clean_text(request.__dict__.get(PREFIX_ATTRIBUTE, ""), KEY_PREFIX_LENGTH),
        client_address=client_address(request),
        request_id=current_request_id(),
        client_request_id=current_client_request_id(),
        method=clean_text(request.method or "", 10),
        path=clean_text(redact(path), 500),  # a dashboard token sent as an API path
        action=clean_text(record.action or ((match.url_name or "") if match else ""), 100),
        scope=clean_scope(record.scope) if key else {},
        client=client_headers(request),
        result_count=record.result_count,
        status=status,
        duration_ms=round((time.perf_counter() - record.started) * 1000, 3),
        created_at=timezone.now(),
    )
    if key is not None:
        now = timezone.now()
        stale = now - timedelta(seconds=KEY_LAST_USED_RESOLUTION_SECONDS)
        if key.last_used_at is None or key.last_used_at < stale:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
