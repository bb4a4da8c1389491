"""Search: v3 answers an envelope {"results": [...]}, v1 and v2 a bare list; with enable_graph
all three answer {"results": [...], "relations": [...]}.

latest_only=false also searches superseded memories (queries.matching); include_merged and
keyword_search are accepted and change nothing (engram never merges; keywords always count).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import queries
from memory.api import responses as r
from memory.api import serializers as s
from memory.api.common import matching, tenant
from memory.api.graph import search_relations as graph_relations
from memory.retrieval.filters import scope_values
from memory.text.embeddings import embed_one


def search(request: Request, *, envelope: bool) -> Response:
    serializer = s.SearchSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    top_k = data.get("limit") or data["top_k"]
    scope = serializer.scope()
    # One user's (agent's, run's) memories are few enough to rank exactly; see hybrid_search.
    scoped = any(scope.values()) or bool(scope_values(data.get("filters") or {}))
    embedding = embed_one(data["query"])  # before the transaction: a hosted embedder is HTTP
    with tenant(request) as project:
        results = matching(request, data).search(
            data["query"], top_k=top_k, threshold=data["threshold"], exact=scoped,
            embedding=embedding, reference=data.get("reference_date"),
        )  # fmt: skip
        note_access(request, result_count=len(results))
        # The lineage of what was found, when superseded versions are asked for: a default
        # search (latest only) is on every LLM call's path and skips this query.
        linked = (
            queries.linked_memory_ids(project, [hit.memory.id for hit in results])
            if not data.get("latest_only", True)
            else {}
        )
        # enable_graph: the relations behind the results, and the entities the query names.
        relations = (
            queries.search_relations(
                project, s.merged_filters(data), data["query"], [hit.memory.id for hit in results]
            )
            if data["enable_graph"]
            else None
        )
    items = [
        {
            **s.memory_data(r.memory, linked.get(r.memory.id)),
            "score": round(r.score.score, 6),
            "score_breakdown": {
                "semantic": round(r.score.semantic, 6),
                "bm25": round(r.score.bm25, 6),
                "entity": round(r.score.entity, 6),
            },
        }
        for r in results
    ]
    if relations is not None:
        # Mem0 answered graph searches with an object on every version (results, relations).
        return Response({"results": items, "relations": graph_relations(relations)})
    return Response({"results": items} if envelope else items)


@extend_schema(
    request=s.SearchSerializer,
    responses=r.answers({200: r.SEARCH_V3}, body=True, embeds=True),
    parameters=[r.RETRY_AFTER],
    summary="Search memories (v3)",
)
@api_view(["POST"])
def search_v3(request: Request) -> Response:
    return search(request, envelope=True)


@extend_schema(
    request=s.SearchSerializer,
    responses=r.answers({200: r.SEARCH_LEGACY}, body=True, embeds=True),
    parameters=[r.RETRY_AFTER],
    summary="Search memories (v1/v2: a bare list)",
)
@api_view(["POST"])
def search_legacy(request: Request) -> Response:
    return search(request, envelope=False)
