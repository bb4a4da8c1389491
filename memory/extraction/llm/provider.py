"""Which extractor this process uses: `get_extractor`, from the settings.

May import llm.types, llm.claude and llm.offline (and Django's settings).
"""

from __future__ import annotations

import functools

from django.conf import settings

from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.llm.types import Extractor


def get_extractor() -> Extractor:
    """Claude when ANTHROPIC_API_KEY is set, the offline extractor otherwise.

    One per process and configuration: the SDK client (its connection pool) is reused by every
    job a worker runs, instead of one client per job.
    """
    if not settings.ANTHROPIC_API_KEY:
        return OfflineExtractor()
    return _claude(
        (
            settings.ANTHROPIC_API_KEY,
            settings.ANTHROPIC_BASE_URL,
            settings.ENGRAM_LLM_MODEL,
            settings.ENGRAM_LLM_MAX_TOKENS,
            settings.ENGRAM_LLM_TIMEOUT,
            settings.ENGRAM_LLM_MAX_RETRIES,
        )
    )


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
