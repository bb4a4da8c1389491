"""Which extractor this process uses: `get_extractor`, from the settings.

May import llm.types, llm.claude, llm.openai_compat and llm.offline (and Django's settings).
"""

from __future__ import annotations

import functools

from django.conf import settings

from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.llm.openai_compat import OpenAIExtractor, Output
from memory.extraction.llm.types import Extractor


def get_extractor() -> Extractor:
    """The extractor ENGRAM_LLM_PROVIDER names (settings.ENGRAM_EXTRACTOR, resolved): Claude,
    a model behind an OpenAI-compatible endpoint, or the offline rules.

    One per process and configuration: the SDK client (its connection pool) is reused by every
    job a worker runs, instead of one client per job.
    """
    limits = (
        settings.ENGRAM_LLM_MODEL,
        settings.ENGRAM_LLM_MAX_TOKENS,
        settings.ENGRAM_LLM_TIMEOUT,
        settings.ENGRAM_LLM_MAX_RETRIES,
    )
    if settings.ENGRAM_EXTRACTOR == "claude":
        return _claude((settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL, *limits))
    if settings.ENGRAM_EXTRACTOR == "openai":
        endpoint = (
            settings.ENGRAM_OPENAI_API_KEY,
            settings.ENGRAM_OPENAI_BASE_URL,
            settings.ENGRAM_OPENAI_OUTPUT,
            settings.ENGRAM_OPENAI_IMAGES,
        )
        return _openai((*endpoint, *limits))
    return OfflineExtractor()


@functools.lru_cache(maxsize=4)
def _claude(config: tuple[str, str | None, str, int, int, int]) -> ClaudeExtractor:
    api_key, base_url, model, max_tokens, timeout, retries = config
    return ClaudeExtractor(
        api_key=api_key,
        base_url=base_url,
        model=model,
        max_tokens=max_tokens,
        timeout=timeout,
        max_retries=retries,
    )


@functools.lru_cache(maxsize=4)
def _openai(config: tuple[str | None, str, Output, bool, str, int, int, int]) -> OpenAIExtractor:
    api_key, base_url, output, images, model, max_tokens, timeout, retries = config
    return OpenAIExtractor(
        api_key=api_key,
        base_url=base_url,
        output=output,
        images=images,
        model=model,
        max_tokens=max_tokens,
        timeout=timeout,
        max_retries=retries,
    )
