"""Feedback on one memory."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import actions
from memory.api import responses as r
from memory.api import serializers as s
from memory.api.common import get_memory, tenant


@extend_schema(
    request=s.FeedbackSerializer,
    responses=r.answers(
        {200: r.FeedbackResultSerializer}, body=True, errors={404: r.NO_SUCH_MEMORY}
    ),
    parameters=[r.RETRY_AFTER],
    summary="Feedback on a memory",
)
@api_view(["POST"])
def feedback(request: Request) -> Response:
    serializer = s.FeedbackSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    with tenant(request):
        memory = get_memory(request, data["memory_id"])
        row = actions.do_record_feedback(
            memory, feedback=data.get("feedback"), reason=data.get("feedback_reason") or ""
        )
        note_access(request, scope=memory.scope, result_count=1)
    return Response(
        {"id": str(row.id), "feedback": row.feedback, "feedback_reason": row.feedback_reason}
    )
