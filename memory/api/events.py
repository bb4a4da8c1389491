"""Events: the status and results of queued add requests (infer=true)."""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import actions, queries
from memory.api import responses as r
from memory.api.common import MemoryPagination, _positive, actor, tenant
from memory.models import MemoryEvent


def event_data(event: MemoryEvent) -> dict[str, Any]:
    started, completed = event.started_at, event.completed_at
    return {
        "id": str(event.id),
        "event_type": "ADD",
        "status": event.status,
        "payload": event.payload,
        "metadata": event.payload.get("metadata") or {},
        "results": event.results,
        "error": event.error or None,
        "warning": event.warning or None,
        "extractor": event.extractor or None,
        "attempts": event.attempts,
        "usage": event.usage,
        "timings": event.timings,
        "graph_status": event.graph.get("status"),
        "graph": event.graph or None,
        "created_at": event.created_at.isoformat(),
        "updated_at": (completed or started or event.created_at).isoformat(),
        "started_at": started.isoformat() if started else None,
        "completed_at": completed.isoformat() if completed else None,
        "latency": (completed - event.created_at).total_seconds() * 1000 if completed else None,
        "reverted_at": event.reverted_at.isoformat() if event.reverted_at else None,
        "reverted_by": event.reverted_by or None,
    }


@extend_schema(
    responses=r.answers({200: r.EventSerializer}, errors={404: "No such event in this project."}),
    parameters=[r.RETRY_AFTER],
    summary="Status and results of one add request",
)
@api_view(["GET"])
def event_detail(request: Request, event_id: uuid.UUID) -> Response:
    with tenant(request) as project:
        event = queries.event(project, event_id)
        if event is None:
            raise NotFound()
        note_access(request, result_count=1)
    return Response(event_data(event))


@extend_schema(
    responses=r.answers(
        {200: r.EventPageSerializer},
        errors={400: "Unknown status, or an invalid page or page_size.", 404: r.PAST_THE_END},
    ),
    parameters=[
        OpenApiParameter(
            "status",
            str,
            enum=[*MemoryEvent.Status.values, ""],
            description="Any case; empty or absent: every status.",
        ),
        OpenApiParameter(
            "warning",
            str,
            enum=["true", "false", ""],
            description="true: only requests with a warning (a user's add that kept nothing); "
            "false: only those without; empty or absent: all. Any case.",
        ),
        *r.paging(MemoryPagination.max_page_size),
        r.RETRY_AFTER,
    ],
    summary="Add requests, newest first",
)
@api_view(["GET"])
def event_list(request: Request) -> Response:
    wanted = (request.query_params.get("status") or "").upper()
    if wanted and wanted not in MemoryEvent.Status.values:
        raise serializers.ValidationError(
            {"status": f"must be one of {', '.join(MemoryEvent.Status.values)}."}
        )
    warned = (request.query_params.get("warning") or "").lower()
    if warned not in ("true", "false", ""):
        raise serializers.ValidationError({"warning": "must be true or false."})
    _positive(request, "page")
    _positive(request, "page_size", MemoryPagination.max_page_size)
    with tenant(request) as project:
        paginator = MemoryPagination()
        found = queries.events(project, wanted or None)
        if warned == "true":
            found = found.exclude(warning="")
        elif warned == "false":
            found = found.filter(warning="")
        page = paginator.paginate_queryset(found, request) or []
        note_access(request, result_count=len(page))
    return paginator.get_paginated_response([event_data(e) for e in page])


@extend_schema(
    request=None,
    responses=r.answers(
        {200: r.RevertSerializer},
        errors={404: "No such event in this project."},
    )
    | {
        409: OpenApiResponse(
            r.RevertConflictSerializer,
            description="Not processed yet (PENDING, RUNNING) or FAILED, or a memory it changed "
            "was changed again since (conflicts name each later change); nothing was reverted.",
        )
    },
    parameters=[r.RETRY_AFTER],
    summary="Revert an add request: undo everything it did to memory",
)
@api_view(["POST"])
def revert_event(request: Request, event_id: uuid.UUID) -> Response:
    """Undo a processed add request as a whole (actions.do_revert_event); a second call
    answers what the first did."""
    try:
        with tenant(request) as project:
            reversal = actions.do_revert_event(project, event_id, actor=actor(request))
            note_access(request, result_count=len(reversal["results"]))
    except MemoryEvent.DoesNotExist:
        raise NotFound() from None
    except actions.RevertConflictError as refused:
        body = {"detail": refused.detail, "conflicts": refused.conflicts}
        return Response(body, status=status.HTTP_409_CONFLICT)
    return Response(reversal)
