"""The only readers of memory state: request-free, by project and typed arguments.

Views, dashboards, the admin, commands and the extraction pipeline all read through these (and
the MemoryQuerySet methods they build on). Each runs in the caller's tenant context
(tenants.db.project_context): without one, row-level security shows no rows at all, so a read
that forgot its context finds nothing rather than another tenant's memories.

This module is the package's interface: callers write `from memory import queries` and call
`queries.…(…)`. The modules:

- core: memories (every read's base), one memory, matching a filter, linked (superseded)
  memories, one scope's memories, the scope ids in use, histories;
- records: add requests (events) and their usage (per day, per model, per user or agent),
  exports, Idempotency-Keys, erasure requests;
- calls: the project's API calls, per day and per endpoint (from the access log);
- relations: the graph reads (graph_edges, paged relations, traversal, a search's relations);
- dashboard: the dashboards' reads (scope counts, the browser, an end user's own memories,
  where a memory came from);
- pages: pages that never drop a row (the API's and the dashboards' lists);
- purge: what purge_expired reads (expired memories, retention periods, memories due).

May import memory.models, memory.graph, memory.retrieval, memory.text, audit.models, tenants and
Django; never memory.actions, memory.search, memory.extraction or the entry points (memory.api,
memory.mcp, memory.web).
"""

from __future__ import annotations

from memory.queries.calls import calls_per_day, calls_per_endpoint
from memory.queries.core import (
    ENTITY_TYPES,
    active_for_update,
    entities,
    get_memory,
    histories,
    history,
    linked_for_update,
    linked_memory_ids,
    matching,
    memories,
    scope_lookup,
    scope_memories,
)
from memory.queries.dashboard import (
    ScopeCounts,
    browse_memories,
    memory_in_any_state,
    memory_texts,
    scope_counts,
    source_messages,
    sources_of,
    user_deleted_memories,
    user_memories,
    user_memories_listed,
    user_memory,
    user_memory_kept,
    user_relations,
)
from memory.queries.pages import StablePaginator
from memory.queries.purge import Retention, expired, retention, retention_due
from memory.queries.records import (
    erasure,
    erasures,
    event,
    events,
    events_by_id,
    export,
    idempotent_request,
    model_usage_per_day,
    rerank_usage_per_day,
    usage_per_day,
    usage_per_scope,
    user_usage_per_day,
)
from memory.queries.relations import (
    SEARCH_RELATIONS,
    GraphRelations,
    entity_display_names,
    graph_edges,
    graph_relations,
    graph_traversal,
    own_names,
    search_relations,
)

__all__ = [
    "ENTITY_TYPES",
    "SEARCH_RELATIONS",
    "GraphRelations",
    "Retention",
    "ScopeCounts",
    "StablePaginator",
    "active_for_update",
    "browse_memories",
    "calls_per_day",
    "calls_per_endpoint",
    "entities",
    "entity_display_names",
    "erasure",
    "erasures",
    "event",
    "events",
    "events_by_id",
    "expired",
    "export",
    "get_memory",
    "graph_edges",
    "graph_relations",
    "graph_traversal",
    "histories",
    "history",
    "idempotent_request",
    "linked_for_update",
    "linked_memory_ids",
    "matching",
    "memories",
    "memory_in_any_state",
    "memory_texts",
    "model_usage_per_day",
    "own_names",
    "rerank_usage_per_day",
    "retention",
    "retention_due",
    "scope_counts",
    "scope_lookup",
    "scope_memories",
    "search_relations",
    "source_messages",
    "sources_of",
    "usage_per_day",
    "usage_per_scope",
    "user_deleted_memories",
    "user_memories",
    "user_memories_listed",
    "user_memory",
    "user_memory_kept",
    "user_relations",
    "user_usage_per_day",
]
