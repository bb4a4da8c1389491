"""Mem0-compatible memory endpoints. Views parse, call one action or query, and serialize."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db.models import CharField, Count, F, IntegerField, Max, Min, Q, Value
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import actions
from memory.api import serializers as s
from memory.models import (
    SCOPE_FIELDS,
    Memory,
    MemoryEvent,
    MemoryExport,
    MemoryHistory,
    MemoryQuerySet,
)
from memory.retrieval.filters import scope_values
from tenants.authentication import request_key

ENTITY_TYPES = {"user": "user_id", "agent": "agent_id", "app": "app_id", "run": "run_id"}


def actor(request: Request) -> str:
    return f"api:{request_key(request).prefix}"


def project_memories(request: Request) -> MemoryQuerySet:
    return Memory.objects.for_project(request_key(request).project_id)


def get_memory(request: Request, memory_id: uuid.UUID) -> Memory:
    """The project's memory, or 404 — also for another project's id, which must not leak."""
    memory = (
        project_memories(request).light().exclude(state=Memory.State.DELETED).filter(pk=memory_id)
    )
    found = next(iter(memory), None)
    if found is None:
        raise NotFound()
    return found


def matching(request: Request, data: dict[str, Any]) -> MemoryQuerySet:
    """Active memories matching the validated filters (compiled by the serializer, with the
    top-level scope ids), categories and expiry options."""
    queryset = project_memories(request).active().filter(data["where"])
    if not data.get("show_expired"):
        queryset = queryset.unexpired()
    if data.get("categories"):
        queryset = queryset.filter(categories__overlap=[c.lower() for c in data["categories"]])
    if data.get("start_date"):
        queryset = queryset.filter(created_at__gte=data["start_date"])
    if data.get("end_date"):
        queryset = queryset.filter(created_at__lte=data["end_date"])
    note_access(request, scope=scope_values(s.merged_filters(data)))
    return queryset


@extend_schema(responses=OpenApiTypes.OBJECT, request=s.AddSerializer, summary="Add memories")
@api_view(["POST"])
def add_memories(request: Request) -> Response:
    return add(request)


def add(request: Request) -> Response:
    serializer = s.AddSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    if data["infer"]:
        return queue_add(request, serializer)
    scope = serializer.scope()
    outcome = actions.do_add_messages(
        request_key(request).project,
        messages=data["messages"],
        scope=scope,
        actor=actor(request),
        metadata=data.get("metadata"),
        created_at=serializer.created_at(),
        expiration_date=data.get("expiration_date"),
        immutable=data["immutable"],
    )
    note_access(request, scope=scope, result_count=len(outcome.results))
    body: dict[str, Any] = {
        "message": "Memories stored successfully",
        "status": "SUCCEEDED",
        "event_id": str(outcome.event_id),
        "results": [
            {"id": str(m.id), "data": {"memory": m.text}, "event": event, "memory": m.text}
            for m, event in outcome.results
        ],
    }
    if request.path.startswith("/v1/"):
        body["relations"] = []
    return Response(body)


def queue_add(request: Request, serializer: s.AddSerializer) -> Response:
    """infer=true: record the request and answer at once; a worker extracts the facts."""
    project = request_key(request).project
    payload = serializer.event_payload(project.custom_instructions, project.custom_categories)
    event = actions.do_queue_add(project, payload)
    note_access(request, scope=payload["scope"], result_count=0)
    body = {
        "message": "Memory processing has been queued for background execution",
        "status": "PENDING",
        "event_id": str(event.id),
    }
    return Response([body] if request.path.startswith("/v1/") else body)


def search(request: Request, *, envelope: bool) -> Response:
    serializer = s.SearchSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    top_k = data.get("limit") or data["top_k"]
    scope = serializer.scope()
    # One user's (agent's, run's) memories are few enough to rank exactly; see hybrid_search.
    scoped = any(scope.values()) or bool(scope_values(data.get("filters") or {}))
    results = matching(request, data).search(
        data["query"], top_k=top_k, threshold=data["threshold"], exact=scoped
    )
    note_access(request, result_count=len(results))
    items = [
        {
            **s.memory_data(r.memory),
            "score": round(r.score.score, 6),
            "score_breakdown": {
                "semantic": round(r.score.semantic, 6),
                "bm25": round(r.score.bm25, 6),
                "entity": round(r.score.entity, 6),
            },
        }
        for r in results
    ]
    return Response({"results": items} if envelope else items)


@extend_schema(
    responses=OpenApiTypes.OBJECT, request=s.SearchSerializer, summary="Search memories (v3)"
)
@api_view(["POST"])
def search_v3(request: Request) -> Response:
    return search(request, envelope=True)


@extend_schema(
    responses=OpenApiTypes.OBJECT,
    request=s.SearchSerializer,
    summary="Search memories (v1/v2: a bare list)",
)
@api_view(["POST"])
def search_legacy(request: Request) -> Response:
    return search(request, envelope=False)


_DIGITS = re.compile(r"[0-9]{1,9}")


class MemoryPagination(PageNumberPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 200


def _positive(request: Request, name: str, maximum: int | None = None) -> None:
    raw = request.query_params.get(name)
    if raw is None:
        return
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
    if not _DIGITS.fullmatch(raw) or int(raw) < 1 or (maximum is not None and int(raw) > maximum):
        bound = f" and at most {maximum}" if maximum else ""
        raise serializers.ValidationError({name: f"must be an integer of at least 1{bound}."})


def list_memories(request: Request, data: dict[str, Any], *, paged: bool) -> Response:
    serializer = s.ListSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    queryset = matching(request, serializer.validated_data).light().order_by("-created_at", "-id")
    if not paged:
        rows = [s.memory_data(m) for m in queryset[:1000]]
        note_access(request, result_count=len(rows))
        return Response(rows)
    _positive(request, "page")
    _positive(request, "page_size", MemoryPagination.max_page_size)
    paginator = MemoryPagination()
    page = paginator.paginate_queryset(queryset, request) or []
    note_access(request, result_count=len(page))
    return paginator.get_paginated_response([s.memory_data(m) for m in page])


@extend_schema(
    responses=OpenApiTypes.OBJECT,
    request=s.ListSerializer,
    parameters=[OpenApiParameter("page", int), OpenApiParameter("page_size", int)],
    summary="List memories (v3, paginated)",
)
@api_view(["POST"])
def list_v3(request: Request) -> Response:
    return list_memories(request, request.data, paged=True)


@extend_schema(
    responses=OpenApiTypes.OBJECT, request=s.ListSerializer, summary="List memories (v2)"
)
@api_view(["POST"])
def list_v2(request: Request) -> Response:
    paged = "page" in request.query_params or "page_size" in request.query_params
    return list_memories(request, request.data, paged=paged)


@extend_schema(
    methods=["GET"],
    responses=OpenApiTypes.OBJECT,
    operation_id="v1_memories_list",
    summary="List memories by scope (v1)",
)
@extend_schema(
    methods=["POST"],
    request=s.AddSerializer,
    responses=OpenApiTypes.OBJECT,
    operation_id="v1_memories_add",
    summary="Add memories (v1)",
)
@extend_schema(
    methods=["DELETE"],
    responses=OpenApiTypes.OBJECT,
    operation_id="v1_memories_delete_all",
    summary="Delete every memory of a scope (v1)",
)
@api_view(["GET", "POST", "DELETE"])
def memories_v1(request: Request) -> Response:
    if request.method == "POST":
        return add(request)
    if request.method == "GET":
        params: dict[str, Any] = {
            k: v for k, v in request.query_params.items() if k in (*SCOPE_FIELDS, "show_expired")
        }
        if "filters" in request.query_params:
            params["filters"] = s.parse_query_filters(request.query_params["filters"])
        paged = "page" in request.query_params or "page_size" in request.query_params
        return list_memories(request, params, paged=paged)
    return delete_all(request)


def delete_all(request: Request) -> Response:
    params = request.query_params
    query = Q()
    named = False
    for field in SCOPE_FIELDS:
        value = params.get(field)
        if value:
            named = True
            query &= Q(**{f"{field}__isnull": False}) if value == "*" else Q(**{field: value})
    if "filters" in params:
        filters = s.parse_query_filters(params["filters"])
        named = named or bool(filters)
        query &= s.compiled(filters)
    if not named:
        raise serializers.ValidationError(
            "Name what to delete: user_id, agent_id, app_id, run_id or filters ('*' for any)."
        )
    queryset = project_memories(request).filter(query)
    count = actions.do_delete_memories(queryset, actor=actor(request))
    note_access(request, scope={f: params.get(f) for f in SCOPE_FIELDS}, result_count=count)
    return Response({"message": "Memories deleted successfully!", "deleted": count})


@extend_schema(
    methods=["GET"],
    responses=OpenApiTypes.OBJECT,
    operation_id="v1_memory_get",
    summary="Get one memory",
)
@extend_schema(
    methods=["PUT"],
    request=s.UpdateSerializer,
    responses=OpenApiTypes.OBJECT,
    operation_id="v1_memory_update",
    summary="Update one memory",
)
@extend_schema(
    methods=["DELETE"],
    responses=OpenApiTypes.OBJECT,
    operation_id="v1_memory_delete",
    summary="Delete one memory",
)
@api_view(["GET", "PUT", "DELETE"])
def memory_detail(request: Request, memory_id: uuid.UUID) -> Response:
    memory = get_memory(request, memory_id)
    note_access(request, scope=memory.scope, result_count=1)
    if request.method == "GET":
        return Response(s.memory_data(memory))
    if request.method == "DELETE":
        actions.do_delete_memory(memory, actor=actor(request))
        return Response({"message": "Memory deleted successfully!"})
    serializer = s.UpdateSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    if memory.immutable:
        raise serializers.ValidationError("This memory is immutable and cannot be updated.")
    data = serializer.validated_data
    updated = actions.do_update_memory(
        memory,
        actor=actor(request),
        text=data["text"],
        metadata=data.get("metadata"),
        expiration_date=data.get("expiration_date", actions.UNSET),
        created_at=datetime.fromtimestamp(data["timestamp"], tz=UTC)
        if "timestamp" in data
        else None,
    )
    return Response(s.memory_data(updated))


def history_data(row: MemoryHistory) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "memory_id": str(row.memory_id),
        "event": row.event,
        "old_memory": row.old_memory,
        "new_memory": row.new_memory,
        "input": row.input,
        "actor": row.actor,
        "event_id": str(row.event_id) if row.event_id else None,
        "user_id": row.user_id,
        "agent_id": row.agent_id,
        "app_id": row.app_id,
        "run_id": row.run_id,
        "session_id": row.run_id,
        "categories": row.categories,
        "metadata": row.metadata,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.created_at.isoformat(),
    }


@extend_schema(responses=OpenApiTypes.OBJECT, summary="History of one memory")
@api_view(["GET"])
def memory_history(request: Request, memory_id: uuid.UUID) -> Response:
    if not project_memories(request).filter(pk=memory_id).exists():
        raise NotFound()
    rows = MemoryHistory.objects.filter(
        project_id=request_key(request).project_id, memory_id=memory_id
    ).order_by("created_at", "id")
    data = [history_data(r) for r in rows]
    note_access(request, result_count=len(data))
    return Response(data)


def _batch_memories(request: Request, ids: list[uuid.UUID]) -> dict[uuid.UUID, Memory]:
    found = {
        m.id: m for m in project_memories(request).active().filter(pk__in=ids).select_for_update()
    }
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise serializers.ValidationError(f"Memories not found: {', '.join(missing[:10])}.")
    return found


@extend_schema(
    responses=OpenApiTypes.OBJECT,
    request=s.BatchSerializer,
    summary="Update or delete up to 1000 memories, all or nothing",
)
@api_view(["PUT", "DELETE"])
def batch(request: Request) -> Response:
    serializer = s.BatchSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    items = serializer.validated_data["memories"]
    memories = _batch_memories(request, [item["memory_id"] for item in items])
    if request.method == "DELETE":
        count = actions.do_batch_delete(list(memories.values()), actor=actor(request))
        note_access(request, result_count=count)
        return Response({"message": f"Successfully deleted {count} memories"})
    immutable = [str(m.id) for m in memories.values() if m.immutable]
    if immutable:
        raise serializers.ValidationError(f"Immutable memories cannot be updated: {immutable[0]}.")
    updates = [
        actions.BatchUpdate(memories[i["memory_id"]], i.get("text"), i.get("metadata"))
        for i in items
    ]
    count = actions.do_batch_update(updates, actor=actor(request))
    note_access(request, result_count=count)
    return Response({"message": f"Successfully updated {count} memories"})


class EntityPagination(PageNumberPagination):
    # Large pages: the official client's delete_users() reads only the first one.
    page_size = 1000
    page_size_query_param = "page_size"
    max_page_size = 1000


@extend_schema(
    responses=OpenApiTypes.OBJECT,
    parameters=[OpenApiParameter("page", int), OpenApiParameter("page_size", int)],
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
    responses=OpenApiTypes.OBJECT,
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


@extend_schema(
    responses=OpenApiTypes.OBJECT, request=s.FeedbackSerializer, summary="Feedback on a memory"
)
@api_view(["POST"])
def feedback(request: Request) -> Response:
    serializer = s.FeedbackSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    memory = get_memory(request, data["memory_id"])
    row = actions.do_record_feedback(
        memory, feedback=data.get("feedback"), reason=data.get("feedback_reason") or ""
    )
    note_access(request, scope=memory.scope, result_count=1)
    return Response(
        {"id": str(row.id), "feedback": row.feedback, "feedback_reason": row.feedback_reason}
    )


@extend_schema(
    responses=OpenApiTypes.OBJECT,
    request=s.ExportSerializer,
    summary="Export the memories matching filters",
)
@api_view(["POST"])
def create_export(request: Request) -> Response:
    serializer = s.ExportSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    memories = matching(request, data).light().order_by("created_at", "id")
    cap = settings.ENGRAM_MAX_EXPORT_MEMORIES
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
    responses=OpenApiTypes.OBJECT, request=s.ExportGetSerializer, summary="Get a memory export"
)
@api_view(["POST"])
def get_export(request: Request) -> Response:
    serializer = s.ExportGetSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    exports = MemoryExport.objects.filter(project_id=request_key(request).project_id)
    if "memory_export_id" in data:
        exports = exports.filter(pk=data["memory_export_id"])
    elif data.get("filters") is not None:
        exports = exports.filter(filters=data["filters"])
    export = exports.order_by("-created_at").first()
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
        "extractor": event.extractor or None,
        "attempts": event.attempts,
        "usage": event.usage,
        "timings": event.timings,
        "graph_status": None,
        "created_at": event.created_at.isoformat(),
        "updated_at": (completed or started or event.created_at).isoformat(),
        "started_at": started.isoformat() if started else None,
        "completed_at": completed.isoformat() if completed else None,
        "latency": (completed - event.created_at).total_seconds() * 1000 if completed else None,
    }


@extend_schema(responses=OpenApiTypes.OBJECT, summary="Status and results of one add request")
@api_view(["GET"])
def event_detail(request: Request, event_id: uuid.UUID) -> Response:
    event = MemoryEvent.objects.filter(
        project_id=request_key(request).project_id, pk=event_id
    ).first()
    if event is None:
        raise NotFound()
    note_access(request, result_count=1)
    return Response(event_data(event))


@extend_schema(
    responses=OpenApiTypes.OBJECT,
    parameters=[
        OpenApiParameter("status", str),
        OpenApiParameter("page", int),
        OpenApiParameter("page_size", int),
    ],
    summary="Add requests, newest first",
)
@api_view(["GET"])
def event_list(request: Request) -> Response:
    events = MemoryEvent.objects.filter(project_id=request_key(request).project_id)
    wanted = request.query_params.get("status")
    if wanted:
        if wanted.upper() not in MemoryEvent.Status.values:
            raise serializers.ValidationError(
                {"status": f"must be one of {', '.join(MemoryEvent.Status.values)}."}
            )
        events = events.filter(status=wanted.upper())
    _positive(request, "page")
    _positive(request, "page_size", MemoryPagination.max_page_size)
    paginator = MemoryPagination()
    page = paginator.paginate_queryset(events.order_by("-created_at", "-id"), request) or []
    note_access(request, result_count=len(page))
    return paginator.get_paginated_response([event_data(e) for e in page])
