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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from django.db import DataError

from config.exceptions import switching_embeddings
from memory import graph, queries
from memory.models import MemoryQuerySet
from memory.retrieval.search import ScoredMemory, hybrid_search, pinned_scope
from memory.text.embeddings import active_space, in_process
from memory.text.query import Query, analyse, with_own_names
from memory.text.recognise import query_names
from tenants.db import project_context

# The score below which a memory is left out (the API's default `threshold`; the dashboards use
# it too): retrieval.scoring calibrates the score so that this keeps the evidence and drops what
# a scope holds nothing about.
DEFAULT_THRESHOLD = 0.5

T = TypeVar("T")


@dataclass(frozen=True)
class Found:
    hits: list[ScoredMemory]
    # For each hit, the memories it superseded, transitively, nearest first (when asked).
    linked: dict[uuid.UUID, list[uuid.UUID]] = field(default_factory=dict)
    # The graph relations behind the hits and the entities the query names (when asked).
    relations: list[graph.Relation] | None = None
    # The best score of any memory considered, returned or not (None: the scope had none).
    best: float | None = None

    @property
    def nothing_relevant(self) -> bool:
        """No memory passed the threshold: the scope holds nothing about the query, as far as
        the score can tell (or nothing at all: `best` None)."""
        return not self.hits


def prepare(
    project_id: uuid.UUID,
    memories: MemoryQuerySet,
    text: str,
    *,
    reference: datetime | None = None,
) -> Query:
    """`text` analysed for a search of `memories` (memory.text.query.analyse), outside any
    transaction (a hosted embedder is an HTTP call).

    Inside a scope its own user's (or agent's) names count like stop words: "Where does Dana
    live?" in Dana's scope ranks as "Where does the user live?" (own_names). With the local
    model, search() reads them inside the search's transaction (one indexed statement) and
    embeds the neutral text there only when the query names the user (the model needs no
    network); with a hosted embedder they are read here first, in a short read of their own,
    so that no HTTP call is made inside a transaction."""
    scope = pinned_scope(memories)
    if not _subject(scope) or in_process():
        return analyse(text, reference=reference)
    with project_context(project_id):
        own = queries.own_names(project_id, scope, query_names(text))
    return analyse(text, reference=reference, own_names=own, subject=_subject(scope))


def own_names(project_id: uuid.UUID, memories: MemoryQuerySet, query: Query) -> Query:
    """`query` with the names of the scope `memories` pins read as its subject, unless prepare()
    read them already or no user or agent is pinned. In the caller's tenant context."""
    if query.own_names is not None:
        return query
    scope = pinned_scope(memories)
    if not _subject(scope):
        return query
    own = queries.own_names(project_id, scope, query_names(query.text))
    return with_own_names(query, own, _subject(scope)) if own else query


def _subject(scope: dict[str, Any]) -> str:
    """How a query in this scope calls its own user or agent; "" when none is pinned."""
    return "the user" if scope.get("user_id") else "the agent" if scope.get("agent_id") else ""


def following_a_switch(attempt: Callable[[], T]) -> T:
    """Run `attempt` (prepare, then search in the caller's transaction); when it meets vectors of
    another embedding model (the deployment switched models a moment ago and this process has
    not yet followed: memory.text.embeddings), follow now and run it once more, so a search
    answers through a switch."""
    try:
        return attempt()
    except DataError as exc:
        if not switching_embeddings(exc):
            raise
    active_space(fresh=True)
    return attempt()


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
    query = own_names(project_id, memories, query)
    hits = hybrid_search(memories, query, top_k=top_k, threshold=threshold)
    ids = [hit.memory.id for hit in hits]
    return Found(
        list(hits),
        queries.linked_memory_ids(project_id, ids) if linked else {},
        queries.search_relations(project_id, relations_of, query, ids)
        if relations_of is not None
        else None,
        hits.best,
    )
