"""Memories: add, list, get, update and delete one, delete a whole scope, history."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import actions, queries
from memory.api import add_responses as ar
from memory.api import processed
from memory.api import responses as r
from memory.api import serializers as s
from memory.api.common import (
    MemoryPagination,
    _positive,
    actor,
    get_memory,
    matching,
    project_id,
    tenant,
)
from memory.api.idempotency import answer_once, idempotency_key
from memory.models import SCOPE_FIELDS, Memory, MemoryHistory
from memory.text.embeddings import embed
from tenants.authentication import request_key

# The list options GET /v1/memories/ takes from its query string (validated by ListSerializer).
LIST_FLAGS = ("show_expired", "latest_only", "include_merged", "output_format")


@extend_schema(
    request=s.AddSerializer,
    responses=r.answers({200: ar.ADD}, body=True, embeds=True, errors={409: r.KEY_REUSED})
    | ar.SYNCHRONOUS_ADD,
    parameters=[r.IDEMPOTENCY_KEY, r.RETRY_AFTER],
    summary="Add memories (infer=false: stored at once; true: queued)",
)
@api_view(["POST"])
def add_memories(request: Request) -> Response:
    return add(request)


def add(request: Request) -> Response:
    key = idempotency_key(request)
    serializer = s.AddSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    project = request_key(request).project
    add = actions.prepare_add(serializer.add_input(project))
    data = serializer.validated_data
    with tenant(request):
        note_access(request, scope=add.scope)
        response = answer_once(
            request,
            key,
            lambda: added(request, actions.do_add(project, add, actor=actor(request)), data),
        )
    # Queued and committed: a synchronous add waits for the worker (a replay too).
    if processed.synchronous(request, data) and response.status_code == 200:
        event_id = processed.queued_event_id(response.data)
        if event_id is not None:
            return processed.answer(request, event_id, data)
    return response


def added(request: Request, outcome: actions.AddOutcome, data: dict[str, Any]) -> Response:
    """The Platform's answer to an add: queued, or the memories stored; on /v1/ in the shape
    Mem0 gave it there, by output_format (and version)."""
    note_access(request, result_count=len(outcome.results))
    legacy = request.path.startswith("/v1/")
    if outcome.queued:
        queued = {
            "message": "Memory processing has been queued for background execution",
            "status": "PENDING",
            "event_id": str(outcome.event_id),
        }
        if not legacy:
            return Response(queued)
        if data.get("output_format") == "v1.1" and data.get("version") == "v2":
            return Response({"results": [queued], "relations": []})
        return Response([queued])
    results = [
        {"id": str(m.id), "data": {"memory": m.text}, "event": event, "memory": m.text}
        for m, event in outcome.results
    ]
    if legacy and data.get("output_format") == "v1.0":
        return Response(results)
    body: dict[str, Any] = {
        "message": "Memories stored successfully",
        "status": "SUCCEEDED",
        "event_id": str(outcome.event_id),
        "results": results,
    }
    if legacy:
        body["relations"] = []
    return Response(body)


def list_memories(request: Request, data: dict[str, Any], *, paged: bool) -> Response:
    serializer = s.ListSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    if paged:
        _positive(request, "page")
        _positive(request, "page_size", MemoryPagination.max_page_size)
    with tenant(request):
        queryset = (
            matching(request, serializer.validated_data).light().order_by("-created_at", "-id")
        )
        if not paged:
            rows = memory_bodies(project_id(request), list(queryset[:1000]))
            note_access(request, result_count=len(rows))
            v1_1 = serializer.validated_data.get("output_format") == "v1.1"
            return Response({"results": rows} if v1_1 else rows)
        paginator = MemoryPagination()
        page = paginator.paginate_queryset(queryset, request) or []
        note_access(request, result_count=len(page))
        return paginator.get_paginated_response(memory_bodies(project_id(request), page))


def memory_bodies(project: uuid.UUID, rows: Sequence[Memory]) -> list[dict[str, Any]]:
    """The memories' bodies, each with its linked_memory_ids (one query for them all)."""
    linked = queries.linked_memory_ids(project, [m.id for m in rows])
    return [s.memory_data(m, linked[m.id]) for m in rows]


@extend_schema(
    request=s.ListSerializer,
    responses=r.answers({200: r.MemoryPageSerializer}, body=True, errors={404: r.PAST_THE_END}),
    parameters=[*r.paging(MemoryPagination.max_page_size), r.RETRY_AFTER],
    summary="List memories (v3, paginated)",
)
@api_view(["POST"])
def list_v3(request: Request) -> Response:
    return list_memories(request, request.data, paged=True)


@extend_schema(
    request=s.ListSerializer,
    responses=r.answers({200: r.MEMORY_LIST}, body=True, errors={404: r.PAST_THE_END}),
    parameters=[*r.paging(MemoryPagination.max_page_size), r.RETRY_AFTER],
    summary="List memories (v2: a list, or a page if page or page_size is given)",
)
@api_view(["POST"])
def list_v2(request: Request) -> Response:
    paged = "page" in request.query_params or "page_size" in request.query_params
    return list_memories(request, request.data, paged=paged)


@extend_schema(
    methods=["GET"],
    responses=r.answers(
        {200: r.MEMORY_LIST},
        errors={400: "Invalid filters, scope id, page or page_size.", 404: r.PAST_THE_END},
    ),
    parameters=[
        *r.SCOPE_PARAMETERS,
        r.SHOW_EXPIRED,
        *r.READ_FLAGS,
        r.OUTPUT_FORMAT,
        *r.paging(MemoryPagination.max_page_size),
        r.RETRY_AFTER,
    ],
    operation_id="v1_memories_list",
    summary="List memories by scope (v1: a list, or a page if page or page_size is given)",
)
@extend_schema(
    methods=["POST"],
    request=s.AddSerializer,
    responses=r.answers({200: ar.ADD_V1}, body=True, embeds=True, errors={409: r.KEY_REUSED})
    | ar.SYNCHRONOUS_ADD,
    parameters=[r.IDEMPOTENCY_KEY, r.RETRY_AFTER],
    operation_id="v1_memories_add",
    summary="Add memories (v1)",
)
@extend_schema(
    methods=["DELETE"],
    responses=r.answers(
        {200: r.DeleteAllResultSerializer},
        errors={400: "No scope named, or invalid filters."},
    ),
    parameters=[*r.SCOPE_PARAMETERS, r.RETRY_AFTER],
    operation_id="v1_memories_delete_all",
    summary="Delete every memory of a scope (v1)",
)
@api_view(["GET", "POST", "DELETE"])
def memories_v1(request: Request) -> Response:
    if request.method == "POST":
        return add(request)
    if request.method == "GET":
        params: dict[str, Any] = {
            k: v for k, v in request.query_params.items() if k in (*SCOPE_FIELDS, *LIST_FLAGS)
        }
        if "filters" in request.query_params:
            params["filters"] = s.parse_query_filters(request.query_params["filters"])
        paged = "page" in request.query_params or "page_size" in request.query_params
        return list_memories(request, params, paged=paged)
    return delete_all(request)


def delete_all(request: Request) -> Response:
    params = request.query_params
    # The ids the query string names, by the filters' rules (an empty one is refused, not
    # ignored: `?user_id=&agent_id=bot` would delete every memory of the agent).
    ids = s.cleaned_scope_ids({field: params[field] for field in SCOPE_FIELDS if field in params})
    query = s.compiled_scope_ids(ids)
    filters = s.parse_query_filters(params["filters"]) if "filters" in params else {}
    query &= s.compiled(filters)
    if not ids and not filters:
        raise serializers.ValidationError(
            "Name what to delete: user_id, agent_id, app_id, run_id or filters ('*' for any)."
        )
    with tenant(request) as project:
        if not filters:  # an add request's pending messages are matched by its scope ids only
            actions.do_cancel_queued_adds(project, ids)
        count = actions.do_delete_memories(
            queries.memories(project).filter(query), actor=actor(request)
        )
        note_access(request, scope={f: ids.get(f) for f in SCOPE_FIELDS}, result_count=count)
    return Response({"message": "Memories deleted successfully!", "deleted": count})


@extend_schema(
    methods=["GET"],
    responses=r.answers({200: r.MemorySerializer}, errors={404: r.NO_SUCH_MEMORY}),
    parameters=[r.RETRY_AFTER],
    operation_id="v1_memory_get",
    summary="Get one memory",
)
@extend_schema(
    methods=["PUT"],
    request=s.UpdateSerializer,
    responses=r.answers(
        {200: r.MemorySerializer}, body=True, embeds=True, errors={404: r.NO_SUCH_MEMORY}
    ),
    parameters=[r.RETRY_AFTER],
    operation_id="v1_memory_update",
    summary="Update one memory",
)
@extend_schema(
    methods=["DELETE"],
    responses=r.answers(
        {200: r.DeletedSerializer},
        errors={
            400: "A delete_linked that is not a boolean, or an immutable memory in the chain "
            "(nothing deleted).",
            404: r.NO_SUCH_MEMORY,
        },
    ),
    parameters=[r.DELETE_LINKED, r.RETRY_AFTER],
    operation_id="v1_memory_delete",
    summary="Delete one memory (delete_linked: and those it superseded)",
)
@api_view(["GET", "PUT", "DELETE"])
def memory_detail(request: Request, memory_id: uuid.UUID) -> Response:
    if request.method == "PUT":
        return update_memory(request, memory_id)
    if request.method == "DELETE":
        return delete_memory(request, memory_id)
    with tenant(request) as project:
        memory = get_memory(request, memory_id)
        note_access(request, scope=memory.scope, result_count=1)
        return Response(memory_bodies(project, [memory])[0])


def delete_memory(request: Request, memory_id: uuid.UUID) -> Response:
    """One memory; with delete_linked, also those it superseded, transitively (Mem0)."""
    # A plain dict: a QueryDict would make an empty value mean "not given".
    flags = s.DeleteSerializer(data=request.query_params.dict())
    flags.is_valid(raise_exception=True)
    cascade = flags.validated_data["delete_linked"]
    with tenant(request) as project:
        memory = get_memory(request, memory_id)
        linked = queries.linked_for_update(project, memory.id) if cascade else []
        count = actions.do_delete_memory(memory, actor=actor(request), linked=linked)
        note_access(request, scope=memory.scope, result_count=1 + count)
    body: dict[str, Any] = {"message": "Memory deleted successfully!"}
    if cascade:
        body["cascade_count"] = count  # Mem0 answers it only when asked to cascade
    return Response(body)


def update_memory(request: Request, memory_id: uuid.UUID) -> Response:
    serializer = s.UpdateSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    vector = embed([data["text"]])[0] if data["text"] is not None else None
    with tenant(request) as project:
        memory = get_memory(request, memory_id)
        note_access(request, scope=memory.scope, result_count=1)
        updated = actions.do_update_memory(
            memory,
            actor=actor(request),
            text=data["text"],
            vector=vector,
            metadata=data.get("metadata"),
            expiration_date=data.get("expiration_date", actions.UNSET),
            created_at=datetime.fromtimestamp(data["timestamp"], tz=UTC)
            if "timestamp" in data
            else None,
        )
        return Response(memory_bodies(project, [updated.memory])[0])


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
        "categories": list(row.categories) or None,  # as memory_data shows them
        "metadata": row.metadata,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.created_at.isoformat(),
    }


@extend_schema(
    responses=r.answers({200: r.HistoryEntrySerializer(many=True)}, errors={404: r.NO_SUCH_MEMORY}),
    parameters=[r.RETRY_AFTER],
    operation_id="v1_memories_history_retrieve",
    summary="History of one memory",
)
@api_view(["GET"])
def memory_history(request: Request, memory_id: uuid.UUID) -> Response:
    with tenant(request) as project:
        rows = queries.history(project, memory_id)
        if rows is None:
            raise NotFound()
        data = [history_data(r) for r in rows]
        note_access(request, result_count=len(data))
        return Response(data)
