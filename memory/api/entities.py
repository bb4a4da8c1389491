"""Entities: the users, agents, apps and runs that have memories; deleting one."""

from __future__ import annotations

from django.db.models import CharField, Count, F, IntegerField, Max, Min, Value
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import actions
from memory.api import responses as r
from memory.api.common import EntityPagination, _positive, actor, project_memories

ENTITY_TYPES = {"user": "user_id", "agent": "agent_id", "app": "app_id", "run": "run_id"}


@extend_schema(
    responses=r.answers(
        {200: r.EntityPageSerializer},
        errors={400: "Invalid page or page_size.", 404: r.PAST_THE_END},
    ),
    parameters=[*r.PAGING, r.RETRY_AFTER],
    summary="Users, agents, apps and runs that have memories (paginated, 1000 a page)",
)
@api_view(["GET"])
def entities(request: Request) -> Response:
    active = project_memories(request).active()
    totals = active.aggregate(
        **{f"total_{kind}s": Count(field, distinct=True) for kind, field in ENTITY_TYPES.items()}
    )
    per_kind = [
        active.filter(**{f"{field}__isnull": False})
        .values(field)
        .annotate(
            rank=Value(rank, output_field=IntegerField()),
            kind=Value(kind, output_field=CharField()),
            entity=F(field),
            total=Count("id"),
            first=Min("created_at"),
            last=Max("updated_at"),
        )
        .values("rank", "kind", "entity", "total", "first", "last")
        for rank, (kind, field) in enumerate(ENTITY_TYPES.items())
    ]
    rows = per_kind[0].union(*per_kind[1:], all=True).order_by("rank", "entity")
    _positive(request, "page")
    _positive(request, "page_size", EntityPagination.max_page_size)
    paginator = EntityPagination()
    page = paginator.paginate_queryset(rows, request) or []
    results = [
        {
            "id": row["entity"],
            "name": row["entity"],
            "type": row["kind"],
            "total_memories": row["total"],
            "created_at": row["first"].isoformat(),
            "updated_at": row["last"].isoformat(),
            "owner": None,
            "metadata": {},
        }
        for row in page
    ]
    note_access(request, result_count=len(results))
    response = paginator.get_paginated_response(results)
    response.data.update(totals)
    return response


@extend_schema(
    responses=r.answers({200: r.MessageResultSerializer}, errors={400: "Unknown entity type."}),
    parameters=[
        OpenApiParameter("entity_type", str, OpenApiParameter.PATH, enum=list(ENTITY_TYPES)),
        r.RETRY_AFTER,
    ],
    summary="Delete an entity (all memories of that user, agent, app or run)",
)
@api_view(["DELETE"])
def delete_entity(request: Request, entity_type: str, name: str) -> Response:
    field = ENTITY_TYPES.get(entity_type)
    if field is None:
        raise serializers.ValidationError(
            f"Unknown entity type {entity_type!r}; use one of {', '.join(ENTITY_TYPES)}."
        )
    queryset = project_memories(request).filter(**{field: name})
    count = actions.do_delete_memories(queryset, actor=actor(request))
    note_access(request, scope={field: name}, result_count=count)
    return Response({"message": f"Entity deleted successfully; {count} memories deleted."})
