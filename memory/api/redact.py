"""Redaction of one memory: its text removed for good from every store (GDPR)."""

from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import actions, queries
from memory.api import responses as r
from memory.api.common import actor, tenant

REASON_MAX_LENGTH = 500


class RedactSerializer(serializers.Serializer[dict[str, str]]):
    reason = serializers.CharField(
        max_length=REASON_MAX_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        help_text="Why (kept in the memory's REDACT history row; put no personal data here).",
    )


@extend_schema(
    request=RedactSerializer,
    responses=r.answers({200: r.RedactedSerializer}, body=True, errors={404: r.NO_SUCH_MEMORY}),
    parameters=[r.RETRY_AFTER],
    summary="Redact a memory: remove its text for good from every store, keep its skeleton",
    description=(
        "A legal removal (GDPR), allowed for any memory of the project: active, superseded, "
        "deleted or immutable. The memory keeps its id, scope and dates, becomes "
        '`redacted` (text "[redacted]", no vector, no metadata) and is never listed, '
        "searched, changed or restored again (GET answers 404; its history stays readable). "
        "Its text goes from every history version (a REDACT row with the caller and the "
        "reason is added), from the messages and results of the add requests that carried "
        "it, from feedback reasons, exports and the neighbouring messages' context; its "
        "entity links, the graph relations only it backed and the entities left without "
        "any, the scope's running summary and the answers kept for Idempotency-Key replays "
        "that hold it are deleted. One purge record (counts, no text). Redacting again "
        "changes nothing (counts all 0)."
    ),
)
@api_view(["POST"])
def redact_memory(request: Request, memory_id: uuid.UUID) -> Response:
    body = RedactSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    with tenant(request) as project:
        memory = queries.memory_in_any_state(project, memory_id)
        if memory is None:
            raise NotFound(r.NO_SUCH_MEMORY)
        note_access(request, scope=memory.scope, result_count=1)
        counts = actions.do_redact_memory(
            memory, actor=actor(request), reason=body.validated_data["reason"]
        )
    return Response({"message": "Memory redacted.", "id": str(memory_id), "counts": counts})
