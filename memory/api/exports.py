"""Exports: a copy of the memories matching filters, created once and fetched later."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import actions, queries
from memory.api import responses as r
from memory.api import serializers as s
from memory.api.common import matching, tenant
from tenants.authentication import request_key


@extend_schema(
    request=s.ExportSerializer,
    responses=r.answers({201: r.ExportCreatedSerializer}, body=True),
    parameters=[r.RETRY_AFTER],
    summary="Export the memories matching filters",
)
@api_view(["POST"])
def create_export(request: Request) -> Response:
    serializer = s.ExportSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    cap = settings.ENGRAM_MAX_EXPORT_MEMORIES
    with tenant(request, status=status.HTTP_201_CREATED):
        memories = matching(request, data).light().order_by("created_at", "id")
        found = list(memories[: cap + 1])
        if len(found) > cap:
            raise serializers.ValidationError(
                f"More than {cap} memories match; an export holds at most {cap} "
                "(ENGRAM_MAX_EXPORT_MEMORIES): narrow the filters, e.g. by user_id or created_at."
            )
        rows = [s.memory_data(m) for m in found]
        export = actions.do_create_export(
            request_key(request).project,
            schema=data["schema"],
            filters=data.get("filters") or {},
            result=rows,
        )
        note_access(request, result_count=len(rows))
    return Response(
        {"message": "Memory export created.", "id": str(export.id)}, status=status.HTTP_201_CREATED
    )


@extend_schema(
    request=s.ExportGetSerializer,
    responses=r.answers(
        {200: r.MemoryExportSerializer}, body=True, errors={404: "No such export."}
    ),
    parameters=[r.RETRY_AFTER],
    summary="Get a memory export (by id, else the newest with these filters)",
)
@api_view(["POST"])
def get_export(request: Request) -> Response:
    serializer = s.ExportGetSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    with tenant(request) as project:
        export = queries.export(
            project, export_id=data.get("memory_export_id"), filters=data.get("filters")
        )
        if export is None:
            raise NotFound()
        note_access(request, result_count=len(export.result))
    return Response(
        {
            "id": str(export.id),
            "schema": export.schema,
            "filters": export.filters,
            "created_at": export.created_at.isoformat(),
            "count": len(export.result),
            "results": export.result,
        }
    )
