"""The search use case, for every entry point: the REST API, the MCP tool and both dashboards.

An entry point parses its input, builds the memories it may search through memory.queries (the
API's filters, a dashboard's scope; a lazy queryset), analyses the query text for them with
prepare() before it opens its transaction (a hosted embedder is an HTTP call), calls search()
inside its tenant context, and, when `rerank` was asked, reranked() after that transaction (a
reranker is an HTTP call too). The ranking, and the choice between an exact scan and the HNSW
index, are memory.retrieval.search's alone. May import memory.queries, memory.retrieval,
memory.graph (its value types), memory.models, memory.text, memory.rerank and tenants.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from django.conf import settings
from django.db import DataError

from config import metrics, tracing
from config.exceptions import switching_embeddings
from memory import graph, queries, rerank
from memory.models import MemoryQuerySet
from memory.retrieval.search import ScoredMemory, hybrid_search, pinned_scope
from memory.text.embeddings import active_space, in_process
from memory.text.language import detect, foreign_to
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
    # Whether the hits are in a reranker's order: None when rerank was not asked, False when it
    # was and they keep the fused order (no reranker configured, or it failed).
    reranked: bool | None = None
    # Each reranked hit's relevance by the reranker (those it ranked).
    rerank_relevance: dict[uuid.UUID, float] = field(default_factory=dict)
    # Rerank asked and not yet done: `hits` are the candidates, cut to top_k by reranked().
    top_k: int | None = None
    # What the reranker's call used (calls, input tokens, output tokens), failed or not; None
    # when none was called. The entry point counts it (actions.do_count_rerank).
    rerank_usage: tuple[int, int, int] | None = None
    # The query's language when the embedding model does not serve it (then the hits are its
    # keyword matches only: foreign_language_hits); None otherwise.
    foreign_language: str | None = None

    @property
    def returned(self) -> int:
        """How many results the answer has (the hits, once cut to top_k)."""
        return len(self.hits) if self.top_k is None else min(self.top_k, len(self.hits))

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
        own = queries.own_names(
            project_id, scope, query_names(text), inflected=detect(text) != "en"
        )
    return analyse(text, reference=reference, own_names=own, subject=_subject(scope))


def own_names(project_id: uuid.UUID, memories: MemoryQuerySet, query: Query) -> Query:
    """`query` with the names of the scope `memories` pins read as its subject, unless prepare()
    read them already or no user or agent is pinned. In the caller's tenant context."""
    if query.own_names is not None:
        return query
    scope = pinned_scope(memories)
    if not _subject(scope):
        return query
    own = queries.own_names(
        project_id, scope, query_names(query.text), inflected=query.language != "en"
    )
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
    rerank_asked: bool = False,
) -> Found:
    """The best `top_k` of `memories` (the project's, already filtered) for `query`, best first.

    `linked` adds each hit's lineage (Mem0's linked_memory_ids: asked with latest_only=false);
    `relations_of`, a filter the graph reads (the search's own, with its scope ids), adds the
    graph relations (enable_graph). Runs in the caller's tenant context.

    `rerank_asked` with a reranker configured finds the best max(top_k, ENGRAM_RERANK_TOP_N),
    so that a small top_k still has the reranker see its candidates: the caller passes the
    answer to reranked() once its transaction is closed, which cuts it to top_k."""
    query = own_names(project_id, memories, query)
    pending = rerank_asked and rerank.configured()
    fetched = max(top_k, settings.ENGRAM_RERANK_TOP_N) if pending else top_k
    ranked = hybrid_search(memories, query, top_k=fetched, threshold=threshold)
    foreign = foreign_to(query.text, active_space().languages)
    hits = foreign_language_hits(ranked) if foreign else list(ranked)
    best = ranked.best
    if foreign and best is not None:
        # How near it came is the best of what it may answer with: 0 when nothing shares a word.
        best = max((hit.score.score for hit in hits), default=0.0)
    ids = [hit.memory.id for hit in hits]
    relations = None
    if relations_of is not None:
        with tracing.span("search.graph"):
            relations = queries.search_relations(project_id, relations_of, query, ids)
    metrics.SEARCHES.labels(
        strategy="exact" if ranked.exact else "hnsw",
        outcome="results" if hits else "nothing_relevant",
    ).inc()
    return Found(
        hits,
        queries.linked_memory_ids(project_id, ids) if linked else {},
        relations,
        best,
        reranked=False if rerank_asked else None,
        top_k=top_k if pending else None,
        foreign_language=foreign,
    )


def foreign_language_hits(hits: list[ScoredMemory]) -> list[ScoredMemory]:
    """What a search can honestly answer in a language its embedding model was not trained on
    (a Chinese question of an English model, whose cosines are then near 1 for everything):
    the hits that share a word with the query (its keyword signal), none on meaning alone."""
    return [hit for hit in hits if hit.score.bm25 > 0]


def foreign_language_warning(found: Found) -> str | None:
    """The warning an answer carries when its query's language is not the model's."""
    if found.foreign_language is None:
        return None
    return (
        f"The query looks {found.foreign_language!r}, a language the embedding model "
        f"({active_space().name}) was not trained on: only memories sharing a word with it are "
        "returned. A multilingual model serves it (docs/languages.md)."
    )


def reranked(found: Found, text: str) -> Found:
    """`found` with its best ENGRAM_RERANK_TOP_N hits in the reranker's order for the query
    `text` (memory.rerank; the rest follow in the fused order), cut to top_k; in the fused order
    when the reranker failed (`reranked` False). Outside any transaction. What the call used,
    failed or not, is in `rerank_usage`.

    The scores and the threshold are the fused ones still: the reranker reorders what passed,
    it does not change what passes. The relations are those of the hits kept (by their new
    rank), then those the query's entities touch."""
    if found.top_k is None:
        return found
    head = found.hits[: settings.ENGRAM_RERANK_TOP_N]
    order = rerank.rerank(text, [hit.memory.text for hit in head])
    if order is None or order.order is None:
        hits = found.hits[: found.top_k]
        return dataclasses.replace(
            found,
            hits=hits,
            relations=_kept(found, hits),
            top_k=None,
            rerank_usage=None if order is None else _used(order),
        )
    ordered = [head[i] for i in order.order] + found.hits[len(head) :]
    hits = ordered[: found.top_k]
    relevance = {head[i].memory.id: score for i, score in order.relevance.items()}
    return dataclasses.replace(
        found,
        hits=hits,
        relations=_kept(found, hits),
        reranked=True,
        rerank_relevance=relevance,
        top_k=None,
        rerank_usage=_used(order),
    )


def _used(order: rerank.Reordered) -> tuple[int, int, int]:
    return (order.usage.calls, order.usage.input_tokens, order.usage.output_tokens)


def _kept(found: Found, hits: list[ScoredMemory]) -> list[graph.Relation] | None:
    """The relations of `found` for the `hits` kept of its candidates: those asserted by a kept
    hit, by the rank of its best one, then those asserted by no candidate (the query's
    entities'), in their order; those of the candidates cut are left out."""
    if found.relations is None:
        return None
    rank = {str(hit.memory.id): n for n, hit in enumerate(hits)}
    candidates = {str(hit.memory.id) for hit in found.hits}
    kept = [r for r in found.relations if any(m in rank for m in r.memory_ids)]
    kept.sort(key=lambda r: min(rank[m] for m in r.memory_ids if m in rank))
    return kept + [r for r in found.relations if not candidates.intersection(r.memory_ids)]
