"""Cross-cutting request plumbing: request ids (also in every log line) and the body size limit."""

from __future__ import annotations

import contextvars
import logging
import re
import uuid
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
# Accept a caller's id only if it is short and plain, so it cannot forge log structure.
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

Handler = Callable[[HttpRequest], HttpResponse]


def current_request_id() -> str:
    return _request_id.get()


class RequestIdLogFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get()
        return True


class RequestIdMiddleware:
    """Give each request an id (the caller's X-Request-ID if valid), echo it, and log with it."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if _VALID_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        # Not reset on the way out: Django logs 4xx/5xx responses after the middleware chain,
        # and those lines should carry the id too. The next request sets its own.
        _request_id.set(request_id)
        response = self.get_response(request)
        response["X-Request-ID"] = request_id
        return response


class BodySizeLimitMiddleware:
    """Refuse a body over ENGRAM_MAX_BODY_BYTES with 413 before anything reads it.

    Bodies without a Content-Length (chunked) are caught later by Django's
    DATA_UPLOAD_MAX_MEMORY_SIZE, which the API exception handler also turns into a 413.
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return JsonResponse({"detail": "Invalid Content-Length header."}, status=400)
        limit: int = settings.ENGRAM_MAX_BODY_BYTES
        if length > limit:
            return JsonResponse(
                {"detail": f"Request body is {length} bytes; the limit is {limit} bytes."},
                status=413,
            )
        return self.get_response(request)
