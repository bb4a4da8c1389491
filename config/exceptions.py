"""One error shape for the whole API: a JSON object with a human-readable `detail`.

The site's error handlers (config/urls.py, settings.CSRF_FAILURE_VIEW) are memory.web.errors:
an HTML page for the dashboards and the admin, and for every other path the JSON answers below."""

from __future__ import annotations

import logging
import re
import sys
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DataError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler, set_rollback

logger = logging.getLogger(__name__)


# Deadlock detected, serialization failure: the database rolled the transaction back.
TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})
# The database cannot serve the request now: disk full, too many connections, shut down or
# crashed (57P01/57P02), starting up (57P03); SQLSTATE class 08 is a connection failure.
UNAVAILABLE_SQLSTATES = frozenset({"53100", "53300", "57P01", "57P02", "57P03"})
UNAVAILABLE_DETAIL = (
    "The database is unavailable (restarting, out of connections or out of space); "
    "the request was not completed. Retry later."
)
UNAVAILABLE_RETRY_AFTER = "5"
# A statement ran past statement_timeout (57014, also a cancel by an operator) or waited past
# lock_timeout (55P03): the database cancelled it and rolled the transaction back
# (config.deadlines sets both).
DEADLINE_SQLSTATES = frozenset({"57014", "55P03"})
DEADLINE_DETAIL = (
    "The request took longer than the server allows (database deadline) and was cancelled; "
    "nothing was changed. Retry later, or ask for less at once (a narrower filter, fewer items)."
)
DEADLINE_RETRY_AFTER = "2"


class RefusedError(ValueError):
    """A rule refused the change (e.g. an immutable memory); the API answers 400 with it."""


class ServiceUnavailableError(RuntimeError):
    """A service engram depends on failed (e.g. a hosted embedder); the API answers 503."""


def _first_message(data: Any, path: str = "") -> str:
    """Flatten DRF's nested validation errors into one line naming the field."""
    if isinstance(data, dict):
        for key, value in data.items():
            name = path if key == "non_field_errors" else (f"{path}.{key}" if path else str(key))
            return _first_message(value, name)
    if isinstance(data, list) and data:
        return _first_message(data[0], path)
    return f"{path}: {data}" if path else str(data)


def _by_field(errors: dict[str, Any] | list[Any]) -> dict[str, Any]:
    """One shape for `errors`: {field: [messages]} (nested like the input); a refusal of the
    request as a whole is under "non_field_errors", as DRF names a serializer's own errors."""
    if isinstance(errors, list):
        return {"non_field_errors": errors}
    return {key: [value] if isinstance(value, str) else value for key, value in errors.items()}


# pgvector's errors for vectors of two dimensions: a process that has not yet followed an
# embedding switch (memory.text.embeddings) embedded with the old model.
_OTHER_DIMENSIONS = re.compile(r"expected \d+ dimensions, not \d+|different vector dimensions")


def switching_embeddings(exc: DataError) -> bool:
    """Whether `exc` is a vector of another dimension than the deployment's (a switch)."""
    return _OTHER_DIMENSIONS.search(str(exc)) is not None


def _data_error(exc: DataError) -> Response:
    """A value the database refused: a vector of another embedding model met the current ones
    (a switch under way: retry), or a backstop behind the input checks, which should refuse such
    values first, with a precise message."""
    if switching_embeddings(exc):
        logger.warning("a vector of another embedding model met the current ones (a switch)")
        return Response(
            {"detail": "The embedding model is being switched; nothing was changed. Retry in a "
             "moment."},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(settings.ENGRAM_EMBEDDING_CHECK_SECONDS + 1)},
        )  # fmt: skip
    # The SQLSTATE only: the message may quote the value, which may be personal data.
    logger.warning("DataError reached the API (SQLSTATE %s)", _sqlstate(exc))
    return Response(
        {"detail": "A value in the request cannot be stored (out of range or malformed)."},
        status=status.HTTP_400_BAD_REQUEST,
    )


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, RequestDataTooBig):
        set_rollback()
        limit = settings.ENGRAM_MAX_BODY_BYTES
        return Response(
            {"detail": f"Request body exceeds the limit of {limit} bytes."},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, RefusedError):
        # Rules the actions enforce for every caller; for the API, a 400 like any bad input.
        exc = exceptions.ValidationError(str(exc))
    if isinstance(exc, DataError):
        set_rollback()
        return _data_error(exc)
    refusal = database_refusal(exc)
    if refusal is not None:
        set_rollback()
        logger.warning("%s (SQLSTATE %s)", refusal.log, _sqlstate(exc))
        return Response(
            {"detail": refusal.detail},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": refusal.retry_after},
        )
    if isinstance(exc, ServiceUnavailableError):
        set_rollback()
        return Response(
            {"detail": "The embedding service is unavailable; nothing was changed. Retry later."},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError) and isinstance(response.data, dict | list):
        errors = _by_field(response.data)
        response.data = {"detail": _first_message(errors), "errors": errors}
    elif not isinstance(response.data, dict) or "detail" not in response.data:
        response.data = {"detail": _first_message(response.data)}
    return response


def _sqlstate(exc: Exception) -> str:
    return str(getattr(exc.__cause__, "sqlstate", None) or "unknown")


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database could not serve the request (not what it asked): a
    lost or refused connection (no SQLSTATE: the server never answered), or one of
    UNAVAILABLE_SQLSTATES or class 08. The message is never shown: it may quote values."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in UNAVAILABLE_SQLSTATES


@dataclass(frozen=True)
class Refusal:
    """Why the database would not do a request's work now: a 503 the client may retry."""

    log: str
    detail: str
    retry_after: str


CONFLICT = Refusal(
    "transaction aborted by the database",
    "A concurrent change conflicted with this request; nothing was changed. Retry.",
    "1",
)
DEADLINE = Refusal("database deadline exceeded", DEADLINE_DETAIL, DEADLINE_RETRY_AFTER)
UNAVAILABLE = Refusal("database unavailable", UNAVAILABLE_DETAIL, UNAVAILABLE_RETRY_AFTER)


def database_refusal(exc: BaseException) -> Refusal | None:
    """The 503 for a database failure the client may retry, or None for any other failure.

    A deadlock or serialization failure (two transactions waited on each other, e.g. graph
    edges locked in different orders, and PostgreSQL aborted this one: nothing of it was
    committed, a retry succeeds); a statement past a deadline; the database unreachable.
    """
    if isinstance(exc, OperationalError) and _sqlstate(exc) in TRANSIENT_SQLSTATES:
        return CONFLICT
    if deadline_exceeded(exc):
        return DEADLINE
    if database_unavailable(exc):
        return UNAVAILABLE
    return None


def deadline_exceeded(exc: BaseException) -> bool:
    """Whether the database cancelled `exc`'s statement at a deadline (config.deadlines)."""
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    return isinstance(exc, OperationalError) and sqlstate in DEADLINE_SQLSTATES


def json_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return JsonResponse({"detail": "Not found."}, status=404)


def json_server_error(request: HttpRequest) -> HttpResponse:
    # Django calls this inside its `except` block: a database failure outside a DRF view (a
    # middleware, the dashboard's session) is still a 503 the client may retry, not a 500.
    refusal = database_refusal(sys.exc_info()[1] or Exception())
    if refusal is not None:
        response = JsonResponse({"detail": refusal.detail}, status=503)
        response["Retry-After"] = refusal.retry_after
        return response
    return JsonResponse({"detail": "Internal server error."}, status=500)


def json_forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    # DRF's words for its own PermissionDenied: a 403 raised outside a DRF view reads the same.
    return JsonResponse(
        {"detail": "You do not have permission to perform this action."}, status=403
    )


def json_csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    # DRF's words for the same refusal (SessionAuthentication), with Django's reason.
    return JsonResponse({"detail": f"CSRF Failed: {reason}"}, status=403)


def json_bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return JsonResponse({"detail": "Bad request."}, status=400)
