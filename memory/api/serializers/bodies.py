"""memory_data: a memory's body, as every answer that carries a memory shows it (the REST
API and the MCP tools alike); search_verdict: what a search answer says besides its results.

May import memory.models and memory.search (its answer); no other module of this package.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from memory.models import Memory
from memory.search import Found, foreign_language_warning


def memory_data(memory: Memory, linked: Sequence[uuid.UUID] | None = None) -> dict[str, Any]:
    """A memory's body; `linked` (queries.linked_memory_ids) adds `linked_memory_ids`."""
    data = {
        "id": str(memory.id),
        "memory": memory.text,
        "user_id": memory.user_id,
        "agent_id": memory.agent_id,
        "app_id": memory.app_id,
        "run_id": memory.run_id,
        "session_id": memory.run_id,
        "actor_id": memory.actor_id or None,
        "role": memory.role or None,
        "hash": memory.hash,
        "metadata": memory.metadata,
        # Null, not [], when there are none: Mem0 answers so, and integrations test for None
        # (LlamaIndex's Mem0Memory writes "[] : <memory>" into the prompt otherwise).
        "categories": list(memory.categories) or None,
        "immutable": memory.immutable,
        "expiration_date": memory.expiration_date.isoformat() if memory.expiration_date else None,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
        "structured_attributes": memory.structured_attributes,
        "replaced_by": str(memory.replaced_by_id) if memory.replaced_by_id else None,
        "synthesized": False,
        "lifecycle_state": memory.state,
        "event_id": str(memory.source_event_id) if memory.source_event_id else None,
    }
    if linked is not None:
        data["linked_memory_ids"] = [str(i) for i in linked]
    return data


def search_verdict(found: Found) -> dict[str, Any]:
    """Whether nothing passed the threshold (`nothing_relevant`) and, when so, how near the
    search came (`best_score`: the best score of any memory considered, rounded as `score`;
    None when the scope holds no memory); with rerank asked, whether the results are in the
    reranker's order (`reranked`); when the query's language is not the embedding model's, a
    `warning` that says so (memory.search.foreign_language_hits). Mem0's clients ignore keys
    they do not know."""
    extra: dict[str, Any] = {} if found.reranked is None else {"reranked": found.reranked}
    warning = foreign_language_warning(found)
    if warning is not None:
        extra["warning"] = warning
    if not found.nothing_relevant:
        return {"nothing_relevant": False, **extra}
    best = None if found.best is None else round(found.best, 6)
    return {"nothing_relevant": True, "best_score": best, **extra}


# The response headers that say the same on every search answer: a bare list (v1 and v2
# without output_format "v1.1") has nowhere else to say it.
NOTHING_RELEVANT_HEADER = "Engram-Nothing-Relevant"
BEST_SCORE_HEADER = "Engram-Best-Score"
RERANKED_HEADER = "Engram-Reranked"
# The query's language, when the embedding model does not serve it (the body's `warning`).
FOREIGN_LANGUAGE_HEADER = "Engram-Foreign-Language"


def search_headers(found: Found) -> dict[str, str]:
    """`Engram-Nothing-Relevant: true|false` and `Engram-Best-Score` (the best score of any
    memory considered, passed or not; absent when the scope holds no memory), and
    `Engram-Reranked: true|false` (true only when asked and done)."""
    headers = {NOTHING_RELEVANT_HEADER: "true" if found.nothing_relevant else "false"}
    if found.best is not None:
        headers[BEST_SCORE_HEADER] = str(round(found.best, 6))
    headers[RERANKED_HEADER] = "true" if found.reranked else "false"
    if found.foreign_language is not None:
        headers[FOREIGN_LANGUAGE_HEADER] = found.foreign_language
    return headers
