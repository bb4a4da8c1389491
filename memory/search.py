"""The search use case, for every entry point: the REST API, the MCP tool and both dashboards.

An entry point parses its input, builds the memories it may search through memory.queries (the
API's filters, a dashboard's scope; a lazy queryset), analyses the query text for them with
prepare() before it opens its transaction (a hosted embedder is an HTTP call), and calls search()
inside its tenant context. The ranking, and the choice between an exact scan and the HNSW index,
are memory.retrieval.search's alone. May import memory.queries, memory.retrieval, memory.graph
(its value types), memory.models, memory.text and tenants.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory import graph, queries
from memory.models import MemoryQuerySet
from memory.retrieval.search import ScoredMemory, hybrid_search, pinned_scope
from memory.text.query import Query, analyse
from memory.text.recognise import query_names
from tenants.db import project_context

# The similarity below which a memory that shares no word, name or time window with the query
# is left out (the API's default `threshold`; the dashboards use it too).
DEFAULT_THRESHOLD = 0.1


@dataclass(frozen=True)
class Found:
    hits: list[ScoredMemory]
    # For each hit, the memories it superseded, transitively, nearest first (when asked).
    linked: dict[uuid.UUID, list[uuid.UUID]] = field(default_factory=dict)
    # The graph relations behind the hits and the entities the query names (when asked).
    relations: list[graph.Relation] | None = None


def prepare(
    project_id: uuid.UUID,
    memories: MemoryQuerySet,
    text: str,
    *,
    reference: datetime | None = None,
) -> Query:
    """`text` analysed for a search of `memories` (memory.text.query.analyse), outside any
    transaction. When `memories` pins a user (or only an agent), the names that user or agent
    goes by are read first, in a short read of its own (queries.own_names), so that inside its
    own scope "Where does Dana live?" ranks as "Where does the user live?"."""
    scope = pinned_scope(memories)
    own: frozenset[str] = frozenset()
    if scope.get("user_id") or scope.get("agent_id"):
        with project_context(project_id):
            own = queries.own_names(project_id, scope, query_names(text))
    subject = "the agent" if not scope.get("user_id") and scope.get("agent_id") else "the user"
    return analyse(text, reference=reference, own_names=own, subject=subject)


def search(
    project_id: uuid.UUID,
    memories: MemoryQuerySet,
    query: Query,
    *,
    top_k: int,
    threshold: float = DEFAULT_THRESHOLD,
    linked: bool = False,
    relations_of: dict[str, Any] | None = None,
) -> Found:
    """The best `top_k` of `memories` (the project's, already filtered) for `query`, best first.

    `linked` adds each hit's lineage (Mem0's linked_memory_ids: asked with latest_only=false);
    `relations_of`, a filter the graph reads (the search's own, with its scope ids), adds the
    graph relations (enable_graph). Runs in the caller's tenant context."""
    hits = hybrid_search(memories, query, top_k=top_k, threshold=threshold)
    ids = [hit.memory.id for hit in hits]
    return Found(
        hits,
        queries.linked_memory_ids(project_id, ids) if linked else {},
        queries.search_relations(project_id, relations_of, query, ids)
        if relations_of is not None
        else None,
    )
