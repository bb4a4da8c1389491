"""The search use case, for every entry point: the REST API, the MCP tool and both dashboards.

An entry point parses its input, analyses the query text with memory.text.query.analyse()
before it opens its transaction (a hosted embedder is an HTTP call), builds the memories it may
search through memory.queries (the API's filters, a dashboard's scope), and calls search()
inside its tenant context. The ranking, and the choice between an exact scan and the HNSW index,
are memory.retrieval.search's alone. May import memory.queries, memory.retrieval, memory.graph
(its value types), memory.models and memory.text.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from memory import graph, queries
from memory.models import MemoryQuerySet
from memory.retrieval.search import ScoredMemory, hybrid_search
from memory.text.query import Query

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
