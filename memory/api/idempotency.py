"""`Idempotency-Key` on add (and on profile jobs, memory.api.profiles): a retried add returns
the first answer and stores nothing again.

A key is 8 to 128 characters of `A-Z a-z 0-9 . _ : -` (else 400), scoped to the key's project.
Its record (memory.models.IdempotentRequest) is taken and written inside the add's own tenant
transaction (`answer_once`), so the add and its record commit or roll back together:

- a new key: the add runs and its answer (status and JSON body) is stored with the key;
- the key with the same request (same path, same body): the stored answer, replayed as is
  (with an `Idempotent-Replayed: true` header);
- the key with another request: 409;
- two requests with one key at once: the second waits on the key's unique index until the
  first commits, then replays its answer (or, if the first rolled back, runs as new).

"The same request" is the SHA-256 of the request path and the canonical JSON of the parsed
body (keys sorted, no whitespace; `request_hash`): a retry may reorder keys or reformat the
JSON, but any change of value is another request. A record is kept ENGRAM_IDEMPOTENCY_HOURS;
after that the key is new again (purge_expired deletes such records).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework import serializers, status
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response

from memory import actions, queries
from memory.api.common import project_id

HEADER = "Idempotency-Key"
_VALID_KEY = re.compile(r"[A-Za-z0-9._:-]{8,128}")


class IdempotencyConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = (
        "This Idempotency-Key was already used with a different request; use a new key."
    )
    default_code = "idempotency_conflict"


def idempotency_key(request: Request) -> str | None:
    """The request's Idempotency-Key, if it sent one; a malformed one is a 400."""
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not _VALID_KEY.fullmatch(key):
        raise serializers.ValidationError(
            {HEADER: "must be 8 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'."}
        )
    return key


def request_hash(request: Request) -> str:
    """SHA-256 of the path and the canonical JSON of the parsed body."""
    canonical = json.dumps(
        {"path": request.path, "body": request.data},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,  # lone surrogates escaped, never an encoding error
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def answer_once(
    request: Request,
    key: str | None,
    answer: Callable[[], Response],
    *,
    replay: Callable[[Any], Any] | None = None,
) -> Response:
    """`answer()`, or the stored answer of an earlier request with the same key (its body
    passed through `replay`, if given: a profile job answers with the job as it is now).

    Call it inside the request's tenant transaction (common.tenant), around the write itself.
    """
    if key is None:
        return answer()
    project = project_id(request)
    digest = request_hash(request)
    expired_before = timezone.now() - timedelta(hours=settings.ENGRAM_IDEMPOTENCY_HOURS)
    if not actions.do_claim_idempotency_key(project, key, digest, expired_before=expired_before):
        first = queries.idempotent_request(project, key)
        if first is None or first.body_hash != digest:
            raise IdempotencyConflict()
        body = first.response if replay is None else replay(first.response)
        return Response(body, status=first.status, headers={"Idempotent-Replayed": "true"})
    response = answer()
    actions.do_record_idempotent_response(project, key, response.status_code, response.data)
    return response
