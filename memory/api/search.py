"""Search: v3 answers an envelope {"results": [...]}, v1 and v2 a bare list, or with
output_format "v1.1" {"results": [...], "relations": []} (Mem0's v1.1 shape); with enable_graph
all three answer {"results": [...], "relations": [...]}.

latest_only=false also searches superseded memories (queries.matching); include_merged and
keyword_search are accepted and change nothing (engram never merges; keywords always count).

An answer with no result says whether that is because nothing is about the query: an object
carries `nothing_relevant` (and then `best_score`), and every answer, the bare list too, the
headers Engram-Nothing-Relevant and Engram-Best-Score.

rerank=true has the configured reranker reorder the best candidates (memory.rerank), after the
tenant transaction has closed: an object then says `reranked` (false: the fused order, no
reranker configured or it failed), and each reranked result's score_breakdown its `rerank`
relevance (docs/rerank.md). Every answer has the header Engram-Reranked (true only then).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import actions
from memory import search as searching
from memory.api import responses as r
from memory.api import serializers as s
from memory.api.common import matching, project_id, tenant
from memory.api.graph import search_relations as graph_relations
from memory.retrieval.search import ScoredMemory


def search(request: Request, *, envelope: bool) -> Response:
    serializer = s.SearchSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    memories = matching(request, data)

    def attempt() -> searching.Found:
        query = searching.prepare(
            project_id(request), memories, data["query"], reference=data.get("reference_date")
        )
        with tenant(request) as project:
            found = searching.search(
                project,
                memories,
                query,
                top_k=data.get("limit") or data["top_k"],
                threshold=data["threshold"],
                # The lineage of what was found, when superseded versions are asked for: a
                # default search (latest only) is on every LLM call's path and skips this query.
                linked=not data.get("latest_only", True),
                relations_of=s.merged_filters(data) if data["enable_graph"] else None,
                rerank_asked=data["rerank"],
            )
            note_access(request, result_count=found.returned)
        return found

    # The reranker is an HTTP call: after the transaction, never inside it.
    found = searching.reranked(searching.following_a_switch(attempt), data["query"])
    if found.rerank_usage is not None:
        calls, input_tokens, output_tokens = found.rerank_usage
        actions.do_count_rerank(
            project_id(request),
            reranked=bool(found.reranked),
            calls=calls,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
    return answer(found, items(found), envelope=envelope, output_format=data.get("output_format"))


def items(found: searching.Found) -> list[dict[str, Any]]:
    """The results' bodies, best first."""
    return [
        {
            **s.memory_data(hit.memory, found.linked.get(hit.memory.id)),
            "score": round(hit.score.score, 6),
            "score_breakdown": breakdown(found, hit),
        }
        for hit in found.hits
    ]


def breakdown(found: searching.Found, hit: ScoredMemory) -> dict[str, float | str]:
    """The signals behind a result's score, the fitted ranker that scored it, and the
    reranker's relevance when it ranked it."""
    signals: dict[str, float | str] = {
        "semantic": round(hit.score.semantic, 6),
        "bm25": round(hit.score.bm25, 6),
        "entity": round(hit.score.entity, 6),
        "relevance": round(hit.score.relevance, 6),
        "distinctiveness": round(hit.score.distinctiveness, 6),
        "answer_gap": round(hit.score.answer_gap, 6),
        "ranker": hit.score.ranker,
    }
    if hit.memory.id in found.rerank_relevance:
        signals["rerank"] = round(found.rerank_relevance[hit.memory.id], 6)
    return signals


def answer(
    found: searching.Found,
    results: list[dict[str, Any]],
    *,
    envelope: bool,
    output_format: str | None,
) -> Response:
    """The answer in the version's shape; an object also says whether nothing was relevant
    (s.search_verdict), and every answer says it in its headers (s.search_headers)."""
    headers = s.search_headers(found)
    verdict = s.search_verdict(found)
    if found.relations is not None:
        # Mem0 answered graph searches with an object on every version (results, relations).
        relations = graph_relations(found.relations)
        return Response({"results": results, "relations": relations, **verdict}, headers=headers)
    if envelope:
        return Response({"results": results, **verdict}, headers=headers)
    if output_format == "v1.1":
        return Response({"results": results, "relations": [], **verdict}, headers=headers)
    return Response(results, headers=headers)


@extend_schema(
    request=s.SearchSerializer,
    responses=r.answers({200: r.SEARCH_V3}, body=True, embeds=True),
    parameters=[r.RETRY_AFTER, *r.SEARCH_HEADERS],
    summary="Search memories (v3)",
)
@api_view(["POST"])
def search_v3(request: Request) -> Response:
    return search(request, envelope=True)


@extend_schema(
    request=s.SearchSerializer,
    responses=r.answers({200: r.SEARCH_LEGACY}, body=True, embeds=True),
    parameters=[r.RETRY_AFTER, *r.SEARCH_HEADERS],
    summary="Search memories (v1/v2: a bare list; an object with output_format v1.1)",
)
@api_view(["POST"])
def search_legacy(request: Request) -> Response:
    return search(request, envelope=False)
