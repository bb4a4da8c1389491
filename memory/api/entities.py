"""Entities: the users, agents, apps and runs that have memories; deleting one."""

from __future__ import annotations

import uuid

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import actions, queries
from memory.api import responses as r
from memory.api import serializers as s
from memory.api.common import EntityPagination, _positive, actor, tenant
from memory.queries import ENTITY_TYPES


@extend_schema(
    responses=r.answers(
        {200: r.EntityPageSerializer},
        errors={400: "Invalid page or page_size.", 404: r.PAST_THE_END},
    ),
    parameters=[*r.paging(EntityPagination.max_page_size), r.RETRY_AFTER],
    summary="Users, agents, apps and runs that have memories (paginated, 1000 a page)",
)
@api_view(["GET"])
def entities(request: Request) -> Response:
    _positive(request, "page")
    _positive(request, "page_size", EntityPagination.max_page_size)
    with tenant(request) as project:
        rows, totals = queries.entities(project)
        paginator = EntityPagination()
        page = paginator.paginate_queryset(rows, request) or []
        note_access(request, result_count=len(page))
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
    response = paginator.get_paginated_response(results)
    response.data.update(totals)
    return response


@extend_schema(
    responses=r.answers(
        {200: r.MessageResultSerializer, 202: r.ErasureQueuedSerializer},
        errors={400: "Unknown entity type."},
    ),
    parameters=[
        OpenApiParameter("entity_type", str, OpenApiParameter.PATH, enum=list(ENTITY_TYPES)),
        OpenApiParameter(
            "name",
            str,
            OpenApiParameter.PATH,
            description="The id, percent-encoded (`team/alpha` as `team%2Falpha`).",
        ),
        r.RETRY_AFTER,
    ],
    summary="Delete an entity: all memories of that agent, app or run; a user is erased (GDPR)",
    description=(
        "An agent, app or run: its memories are deleted (the soft delete), 200. A user: their "
        "memories are hidden at once and the user is erased from every store by a worker "
        "(the GDPR erasure of `manage.py purge_user`), 202 with the erasure's id as "
        "`event_id`; follow it at `GET /v1/erasures/{id}/`."
    ),
)
@api_view(["DELETE"])
def delete_entity(request: Request, entity_type: str, name: str) -> Response:
    field = ENTITY_TYPES.get(entity_type)
    if field is None:
        raise serializers.ValidationError(
            f"Unknown entity type {entity_type!r}; use one of {', '.join(ENTITY_TYPES)}."
        )
    try:  # as an add stores it (" x " is "x"); an id no memory can have is a 400
        name = s.scope_id(name)
    except s.ScopeIdError as exc:
        raise serializers.ValidationError(f"A {entity_type} id {exc}") from None
    with tenant(request, status=202 if field == "user_id" else 200) as project:
        erasure = None
        if field == "user_id":
            count, erasure = actions.do_hide_and_request_erasure(
                project, name, actor=actor(request)
            )
        else:
            actions.do_cancel_queued_adds(project, {field: name})
            count = actions.do_delete_memories(
                queries.memories(project).filter(**{field: name}), actor=actor(request)
            )
        note_access(request, scope={field: name}, result_count=count)
    if erasure is None:
        return Response({"message": f"Entity deleted successfully; {count} memories deleted."})
    message = f"Entity deleted successfully; {count} memories hidden, erasure queued."
    return Response(
        {"message": message, "event_id": str(erasure.id), "status": erasure.status}, status=202
    )


@extend_schema(
    responses=r.answers({200: r.ErasureSerializer}, errors={404: "No such erasure here."}),
    parameters=[r.RETRY_AFTER],
    summary="Status of an erasure asked with DELETE /v2/entities/user/{id}/",
)
@api_view(["GET"])
def erasure_detail(request: Request, erasure_id: uuid.UUID) -> Response:
    with tenant(request) as project:
        found = queries.erasure(project, erasure_id)
        if found is None:
            raise NotFound()
        note_access(request, result_count=1)
    return Response(
        {
            "id": str(found.id),
            "subject_kind": found.subject_kind,
            "status": found.status,
            "attempts": found.attempts,
            "counts": found.counts,
            "error": found.error or None,
            "created_at": found.created_at.isoformat(),
            "completed_at": found.completed_at.isoformat() if found.completed_at else None,
        }
    )
