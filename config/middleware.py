"""Cross-cutting request plumbing: request ids (also in every log line), the request's time
budget, the client's address, the body size limit (chunked bodies included) and the
Content-Security-Policy header."""

from __future__ import annotations

import contextvars
import io
import ipaddress
import logging
import re
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from config import deadlines

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_client_request_id: contextvars.ContextVar[str] = contextvars.ContextVar(
    "client_request_id", default=""
)
# A caller's id is kept only if it is short and plain, so it cannot forge log structure.
_VALID_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")

Handler = Callable[[HttpRequest], HttpResponse]


def current_request_id() -> str:
    return _request_id.get()


def current_client_request_id() -> str:
    """The caller's X-Request-ID, if it had a plain shape; "" otherwise."""
    return _client_request_id.get()


class RequestIdLogFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get()
        client_request_id = _client_request_id.get()
        if client_request_id:
            record.client_request_id = client_request_id
        return True


class RequestIdMiddleware:
    """Give each request an id of our own, echo it in X-Request-ID, and log with it.

    A caller's X-Request-ID is never used as our id: ids a caller chooses can repeat, or copy
    another request's, and would then mix unrelated requests in the logs and the access log.
    A plain-shaped one is kept beside ours (access log `client_request_id`, log lines).
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = uuid.uuid4().hex
        incoming = request.headers.get("X-Request-ID", "")
        # Not reset on the way out: Django logs 4xx/5xx responses after the middleware chain,
        # and those lines should carry the ids too. The next request sets its own.
        _request_id.set(request_id)
        _client_request_id.set(incoming if _VALID_REQUEST_ID.fullmatch(incoming) else "")
        response = self.get_response(request)
        response["X-Request-ID"] = request_id
        return response


def _ip_address(value: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address(value or ""))
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str | None:
    """The client's IP address: the peer's, or the one the trusted proxies in front saw.

    With ENGRAM_TRUSTED_PROXY_HOPS = N, each of the N proxies appends the address it received
    the request from to X-Forwarded-For, so the Nth entry from the right is the client as the
    outermost proxy saw it. Entries further left are whatever the client sent: never trusted.
    """
    hops: int = settings.ENGRAM_TRUSTED_PROXY_HOPS
    if hops:
        forwarded = [
            entry.strip()
            for entry in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")
            if entry.strip()
        ]
        if forwarded:
            address = _ip_address(forwarded[-min(hops, len(forwarded))])
            if address is not None:
                return address
    return _ip_address(request.META.get("REMOTE_ADDR"))


def _is_chunked(environ: WSGIEnvironment | dict[str, Any]) -> bool:
    return (
        not environ.get("CONTENT_LENGTH")
        and "chunked" in str(environ.get("HTTP_TRANSFER_ENCODING", "")).lower()
    )


class ChunkedBodyMiddleware:
    """WSGI middleware: hand Django a chunked request body (Transfer-Encoding: chunked).

    Django reads exactly CONTENT_LENGTH bytes, so a body sent without a length looks empty to
    it. When the server has decoded the chunks and says where the body ends (gunicorn sets
    `wsgi.input_terminated`), read at most the body limit plus one byte and pass it on with its
    length; a longer body then gets BodySizeLimitMiddleware's 413 without being read further.
    """

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if _is_chunked(environ) and environ.get("wsgi.input_terminated"):
            limit: int = settings.ENGRAM_MAX_BODY_BYTES
            body = environ["wsgi.input"].read(limit + 1)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return self.app(environ, start_response)


class BodySizeLimitMiddleware:
    """Refuse a body over ENGRAM_MAX_BODY_BYTES with 413 before anything reads it.

    A chunked body arrives here with its length (ChunkedBodyMiddleware) under gunicorn; a
    server that cannot tell where it ends gets 411 rather than a body silently taken as empty.
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _is_chunked(request.META):
            return JsonResponse(
                {"detail": "Send the request body with a Content-Length header."}, status=411
            )
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return JsonResponse({"detail": "Invalid Content-Length header."}, status=400)
        limit: int = settings.ENGRAM_MAX_BODY_BYTES
        if length > limit:
            return JsonResponse(
                {"detail": f"Request body exceeds the limit of {limit} bytes."}, status=413
            )
        return self.get_response(request)


class RequestBudgetMiddleware:
    """One time budget for all of a request's statements (config.deadlines.request_budget)."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with deadlines.request_budget():
            return self.get_response(request)


class ContentSecurityPolicyMiddleware:
    """Send ENGRAM_CONTENT_SECURITY_POLICY with every response that does not set its own.

    Every page, script and stylesheet is served by the app itself (no CDN), so the policy can
    allow 'self' only; it matters for the HTML pages (admin, API docs, dashboards).
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", settings.ENGRAM_CONTENT_SECURITY_POLICY)
        return response
