"""The graph: the relations of a scope, paged, and a traversal from one entity.

Both read the way search filters (memory.queries.graph_edges): the scope ids named must match
("*": any value), the others are not tested (NOT "*": unset), at least one has a value; other
filter conditions keep the relations asserted by at least one active memory they match.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import graph, queries
from memory.api import responses as r
from memory.api import serializers as s
from memory.api.common import _positive, project_id, tenant
from memory.models import SCOPE_FIELDS
from memory.retrieval.filters import FilterError, scope_values


class GraphPagination(PageNumberPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = graph.MAX_LIMIT


def relation_data(relation: graph.Relation) -> dict[str, Any]:
    return {
        "id": str(relation.id),
        "source": relation.source,
        "source_id": str(relation.source_id),
        "relationship": relation.relationship,
        "destination": relation.destination,
        "destination_id": str(relation.destination_id),
        "valid": relation.valid,
        "created_at": relation.created_at,
        "invalidated_at": relation.invalidated_at,
        "memory_ids": relation.memory_ids,
        "event_id": relation.event_id,
        **{f: relation.scope.get(f) for f in SCOPE_FIELDS},
    }


def node_data(entity: graph.Entity) -> dict[str, Any]:
    return {
        "id": str(entity.id),
        "name": entity.name,
        "display_name": entity.display_name,
        "type": entity.type,
        "mentions": entity.mentions,
        "created_at": entity.created_at,
        **{f: entity.scope.get(f) for f in SCOPE_FIELDS},
    }


def edge_filter(request: Request, data: dict[str, Any]) -> graph.EdgeFilter:
    """What the validated request reads; a filter the graph cannot take is a 400."""
    filters = data["filters"]
    note_access(request, scope=scope_values(filters))
    try:
        return queries.graph_edges(
            project_id(request), filters, include_invalid=data["include_invalid"]
        )
    except FilterError as exc:
        raise serializers.ValidationError({"filters": str(exc)}) from None


@extend_schema(
    request=s.GraphTraverseSerializer,
    responses=r.answers({200: r.GraphTraversalSerializer}, body=True),
    parameters=[r.RETRY_AFTER],
    summary="What the graph links to an entity, 1-3 hops either way (bounded by limit)",
)
@api_view(["POST"])
def traverse(request: Request) -> Response:
    serializer = s.GraphTraverseSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    edges = edge_filter(request, data)
    with tenant(request) as project:
        found = queries.graph_traversal(
            project, edges, data["entity"], depth=data["depth"], limit=data["limit"]
        )
        note_access(request, result_count=len(found.relations))
    return Response(
        {
            "nodes": [node_data(n) for n in found.nodes],
            "relations": [relation_data(rel) for rel in found.relations],
        }
    )


@extend_schema(
    responses=r.answers(
        {200: r.GraphRelationPageSerializer},
        errors={
            400: "No scope id with a value, invalid filters, page or page_size.",
            404: r.PAST_THE_END,
        },
    ),
    parameters=[
        *r.SCOPE_PARAMETERS,
        OpenApiParameter("include_invalid", bool, description="Contradicted relations too."),
        *r.paging(GraphPagination.max_page_size),
        r.RETRY_AFTER,
    ],
    summary="The relations of a scope, oldest first (paginated, 100 a page, at most 500)",
)
@api_view(["GET"])
def relations(request: Request) -> Response:
    params: dict[str, Any] = {
        k: v for k, v in request.query_params.items() if k in (*SCOPE_FIELDS, "include_invalid")
    }
    if "filters" in request.query_params:
        params["filters"] = s.parse_query_filters(request.query_params["filters"])
    serializer = s.GraphListSerializer(data=params)
    serializer.is_valid(raise_exception=True)
    _positive(request, "page")
    _positive(request, "page_size", GraphPagination.max_page_size)
    edges = edge_filter(request, serializer.validated_data)
    with tenant(request) as project:
        paginator = GraphPagination()
        rows = queries.graph_relations(project, edges)
        page: list[graph.Relation] = paginator.paginate_queryset(rows, request) or []  # type: ignore[arg-type]
        note_access(request, result_count=len(page))
        return paginator.get_paginated_response([relation_data(rel) for rel in page])


def search_relations(relations: list[graph.Relation]) -> list[dict[str, str]]:
    """Search's `relations` (enable_graph): Mem0's triple, with the Platform's `target`."""
    return [
        {
            "source": rel.source,
            "relationship": rel.relationship,
            "destination": rel.destination,
            "target": rel.destination,
        }
        for rel in relations
    ]
