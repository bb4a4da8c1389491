"""Rerank: a second opinion on the order of a search's best candidates (`rerank: true`).

ENGRAM_RERANK chooses who gives it, once per deployment (docs/rerank.md):
- "endpoint": a reranker service, `POST {ENGRAM_RERANK_URL}/rerank`, in Cohere's shape
  (`{"model", "query", "documents", "top_n"}`, as Cohere, Jina, vLLM, llama.cpp's server,
  Infinity and LiteLLM take it) or text-embeddings-inference's (`{"query", "texts"}`), as
  ENGRAM_RERANK_API says; the reply is read in either shape (`{"results": [{"index",
  "relevance_score"}]}` or `[{"index", "score"}]`), whichever it is.
- "judge": the extraction model (Claude or an OpenAI-compatible one, memory.extraction.llm)
  ranks the candidates in one forced tool call. It reorders and never drops: the ids it leaves
  out keep their fused order after the ones it ranked, and ids it invents or repeats are ignored
  (a judge used as a filter loses answers).

A reranker only reorders. Whatever goes wrong (slower than ENGRAM_RERANK_TIMEOUT_MS, down, a 5xx,
malformed JSON, an index out of range) is logged as a warning and `rerank` answers None: the
search keeps the fused order and says it was not reranked. Every call is counted in a log line
(logger memory.rerank, fields calls, input_tokens, output_tokens, ms, outcome).

Called outside any transaction (memory.search.reranked): it is an HTTP call.
May import memory.extraction.llm, config.outbound and Django's settings.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
from anthropic.types import ToolParam
from django.conf import settings

from config import metrics
from config.outbound import deadline_client
from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.llm.model import ModelExtractor
from memory.extraction.llm.openai_compat import OpenAIExtractor
from memory.extraction.llm.provider import get_extractor
from memory.extraction.llm.types import Usage

logger = logging.getLogger(__name__)

# What the judge is shown of each candidate: a memory is a fact or a message, and past this the
# tokens cost more than they tell.
JUDGE_TEXT_CHARS = 1000
# The judge's output budget: a few tokens per ranked id and its relevance, plus the call's own.
JUDGE_TOKENS_BASE = 64
JUDGE_TOKENS_PER_CANDIDATE = 24

JUDGE_SYSTEM = (
    "You rank stored memories by how relevant each is to a search query, for an assistant that "
    "will answer the query with them. Rank every candidate, the one that best answers the query "
    "(or is most about what it asks) first. Do not leave a candidate out because it seems "
    "irrelevant: rank it last. Give each its relevance, from 0 (unrelated) to 1 (answers the "
    "query). Refer to candidates by their id only."
)
JUDGE_TOOL: ToolParam = {
    "name": "record_ranking",
    "description": "Record the candidates' ids, the most relevant to the query first.",
    "input_schema": {
        "type": "object",
        "properties": {
            "ranking": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "relevance": {"type": "number", "minimum": 0, "maximum": 1},
                    },
                    "required": ["id", "relevance"],
                },
            }
        },
        "required": ["ranking"],
    },
}


class RerankError(Exception):
    """The reranker's reply cannot be used; `usage` is what it cost all the same."""

    def __init__(self, message: str, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or Usage(1)


@dataclass(frozen=True)
class Reordered:
    """A reranker's order of n candidates: `order`, a permutation of range(n) (those it ranked,
    its best first, then those it left out in their fused order), or None when it failed (the
    fused order stands); its `relevance` of each it ranked; what the call used either way."""

    order: list[int] | None
    relevance: dict[int, float]
    usage: Usage


# A reranker's ranking: candidate indices, its best first, each with its relevance.
Ranking = list[tuple[int, float]]


def configured() -> bool:
    return bool(settings.ENGRAM_RERANK != "off")


def rerank(query: str, documents: Sequence[str]) -> Reordered | None:
    """The configured reranker's order of `documents` for `query`, its `order` None when it
    failed (logged as a warning): the fused order stands; None when none is configured or there
    is nothing to order."""
    if not configured() or not documents:
        return None
    started = time.perf_counter()
    usage = Usage()
    outcome = "reranked"
    try:
        if settings.ENGRAM_RERANK == "judge":
            ranking, usage = _judge(query, documents)
        else:
            ranking, usage = _endpoint(query, documents)
    except RerankError as exc:
        outcome, usage = f"failed: {exc}", exc.usage
    except (httpx.HTTPError, anthropic.APIError, openai.APIError) as exc:
        outcome, usage = f"failed: {type(exc).__name__}: {exc}", Usage(1)
    ms = round((time.perf_counter() - started) * 1000, 3)
    metrics.RERANKS.labels(
        reranker=settings.ENGRAM_RERANK, outcome="reranked" if outcome == "reranked" else "failed"
    ).inc()
    counts = {"reranker": settings.ENGRAM_RERANK, **_counted(usage), "ms": ms, "outcome": outcome}
    if outcome != "reranked":
        logger.warning("rerank %s; the fused order stands", outcome, extra=counts)
        return Reordered(None, {}, usage)
    logger.info("rerank of %d candidates", len(documents), extra=counts)
    return Reordered(permutation([i for i, _ in ranking], len(documents)), dict(ranking), usage)


def _counted(usage: Usage) -> dict[str, int]:
    return {k: getattr(usage, k) for k in ("calls", "input_tokens", "output_tokens")}


def permutation(ranked: Sequence[int], count: int) -> list[int]:
    """range(count) with `ranked` first (in its order; indices out of range or repeated are
    ignored), then every index it leaves out, in order."""
    first = list(dict.fromkeys(i for i in ranked if 0 <= i < count))
    chosen = set(first)
    return first + [i for i in range(count) if i not in chosen]


# -- a reranker service ---------------------------------------------------------------------


def _endpoint(query: str, documents: Sequence[str]) -> tuple[Ranking, Usage]:
    """One POST {ENGRAM_RERANK_URL}/rerank within ENGRAM_RERANK_TIMEOUT_MS, the whole exchange."""
    body: dict[str, Any] = {"query": query}
    if settings.ENGRAM_RERANK_API == "tei":
        body["texts"] = list(documents)
    else:
        body |= {"documents": list(documents), "top_n": len(documents)}
        if settings.ENGRAM_RERANK_MODEL:
            body["model"] = settings.ENGRAM_RERANK_MODEL
    headers = {}
    if settings.ENGRAM_RERANK_API_KEY:
        headers["Authorization"] = f"Bearer {settings.ENGRAM_RERANK_API_KEY}"
    url = settings.ENGRAM_RERANK_URL.rstrip("/") + "/rerank"
    with deadline_client(settings.ENGRAM_RERANK_TIMEOUT_MS / 1000) as client:
        response = client.post(url, json=body, headers=headers)
    response.raise_for_status()
    try:
        reply = response.json()
    except ValueError as exc:
        raise RerankError("the reply is not JSON") from exc
    return endpoint_ranking(reply, len(documents)), Usage(1, _tokens(reply))


def endpoint_ranking(reply: Any, count: int) -> Ranking:
    """A reranker service's reply read, in Cohere's shape ({"results": [{"index",
    "relevance_score"}]}) or TEI's ([{"index", "score"}]), best first; RerankError unless every
    index is one of the `count` candidates, once, with a finite score."""
    items = reply.get("results") if isinstance(reply, dict) else reply
    if not isinstance(items, list):
        raise RerankError("the reply holds no list of results")
    ranking: Ranking = []
    seen: set[int] = set()
    for each in items:
        item = each if isinstance(each, dict) else {}
        index, score = item.get("index"), item.get("relevance_score", item.get("score"))
        if type(index) is not int or not 0 <= index < count or index in seen:
            raise RerankError(f"the reply names index {index!r} of {count} candidates")
        number = _number(score)
        if number is None:
            raise RerankError(f"the reply scores index {index} {score!r}")
        seen.add(index)
        ranking.append((index, number))
    ranking.sort(key=lambda pair: pair[1], reverse=True)  # stable: ties keep the reply's order
    return ranking


def _tokens(reply: Any) -> int:
    """The tokens the service says it read (Jina's, vLLM's and Infinity's `usage`), else 0."""
    usage = reply.get("usage") if isinstance(reply, dict) else None
    tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
    return tokens if type(tokens) is int and tokens >= 0 else 0


# -- the extraction model as a judge --------------------------------------------------------


def _judge(query: str, documents: Sequence[str]) -> tuple[Ranking, Usage]:
    """One forced tool call of the extraction model, no retry, within ENGRAM_RERANK_TIMEOUT_MS
    (the SDK's timeout of each step of the request)."""
    judge = _judge_model()
    prompt = f"## Query\n{query}\n\n## Candidates\n" + "\n".join(
        f"id {index}: {' '.join(text[:JUDGE_TEXT_CHARS].split())}"
        for index, text in enumerate(documents)
    )
    limit = min(JUDGE_TOKENS_BASE + JUDGE_TOKENS_PER_CANDIDATE * len(documents), judge.max_tokens)
    # The provider's one request (llm.model's re-asks would each take another deadline).
    answer = judge._ask(JUDGE_SYSTEM, prompt, attached=(), tool=JUDGE_TOOL, limit=limit, note="")
    if answer.ending != "done" or answer.data is None:
        problem = answer.problem or f"the judge's reply ended {answer.ending}"
        raise RerankError(problem, answer.usage)
    ranking = judge_ranking(answer.data, len(documents))
    if not ranking:
        raise RerankError("the judge ranked none of the candidates", answer.usage)
    return ranking, answer.usage


def _judge_model() -> ModelExtractor:
    """The extraction model (its SDK client and connection pool), with the rerank's deadline
    and no retries."""
    seconds = settings.ENGRAM_RERANK_TIMEOUT_MS / 1000
    extractor = get_extractor()
    if isinstance(extractor, ClaudeExtractor):
        claude = copy.copy(extractor)
        claude.client = extractor.client.with_options(timeout=seconds, max_retries=0)
        return claude
    if isinstance(extractor, OpenAIExtractor):
        compatible = copy.copy(extractor)
        compatible.client = extractor.client.with_options(timeout=seconds, max_retries=0)
        return compatible
    raise RerankError(f"the {extractor.name} extractor cannot judge", Usage())


def judge_ranking(data: dict[str, Any], count: int) -> Ranking:
    """The judge's ranking of the `count` candidates, in its order: ids it did not show (or
    repeats) are ignored, a relevance out of [0, 1] is clamped, a missing one is 0."""
    items = data.get("ranking")
    ranking: Ranking = []
    seen: set[int] = set()
    for each in items if isinstance(items, list) else []:
        item = each if isinstance(each, dict) else {}
        index, relevance = item.get("id"), item.get("relevance")
        if type(index) is not int or not 0 <= index < count or index in seen:
            continue
        seen.add(index)
        ranking.append((index, min(max(_number(relevance) or 0.0, 0.0), 1.0)))
    return ranking


def _number(value: Any) -> float | None:
    """`value` as a float when it is a finite JSON number (not a boolean), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
