"""Claude through the official anthropic SDK: `ClaudeExtractor`.

Every call is one forced tool use (the steps, prompts and checks are llm.model's); here is only
how a request is sent and its reply read: the system prompt's fixed part marked cacheable, the
images and PDFs of the new messages as content blocks, thinking off, what the call cost. Retries
of the API's own failures (429, 5xx, timeouts) are the SDK's, except that a long Retry-After is
not waited out in a worker (llm.waits).

May import llm.types, llm.model and llm.waits (and the anthropic SDK).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import anthropic
from anthropic.types import (
    ContentBlockParam,
    DocumentBlockParam,
    ImageBlockParam,
    MessageParam,
    TextBlockParam,
    ToolChoiceToolParam,
    ToolParam,
)

from memory.extraction.llm.model import Answer, ModelExtractor, System
from memory.extraction.llm.types import Turn, Usage
from memory.extraction.llm.waits import no_long_retry_waits
from memory.parts import IMAGE, PDF


class ClaudeExtractor(ModelExtractor):
    name = "claude"
    attachments = frozenset({IMAGE, PDF})

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        max_tokens: int,
        timeout: float,
        max_retries: int,
        base_url: str | None = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.client = anthropic.Anthropic(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            http_client=anthropic.DefaultHttpxClient(
                event_hooks={"response": [no_long_retry_waits]}
            ),
        )

    def _ask(
        self,
        system: System,
        prompt: str,
        *,
        attached: Sequence[Turn],
        tool: ToolParam,
        limit: int,
        note: str,
    ) -> Answer:
        """One Messages API request forcing `tool` (a forced tool call cannot think: thinking
        is off)."""
        prompt = f"{prompt}\n\n{note}" if note else prompt
        blocks = attachment_blocks(attached)
        text: TextBlockParam = {"type": "text", "text": prompt}
        content: str | list[ContentBlockParam] = [text, *blocks] if blocks else prompt
        messages: list[MessageParam] = [{"role": "user", "content": content}]
        choice: ToolChoiceToolParam = {"type": "tool", "name": tool["name"]}
        response = self.client.messages.create(
            model=self.model,
            max_tokens=limit,
            system=system,
            messages=messages,
            tools=[tool],
            tool_choice=choice,
            thinking={"type": "disabled"},
        )
        usage = usage_of(response.usage)
        if response.stop_reason == "refusal":
            return Answer("refused", usage)
        if response.stop_reason == "max_tokens":
            return Answer("cut", usage)
        data = next(
            (
                dict(b.input)
                for b in response.content
                if b.type == "tool_use" and b.name == tool["name"]
            ),
            None,
        )
        return Answer("done", usage, data)


def usage_of(usage: anthropic.types.Usage) -> Usage:
    """One call's usage, from the Messages API's."""
    return Usage(
        1,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_creation_input_tokens or 0,
        usage.cache_read_input_tokens or 0,
    )


ImageMediaType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
IMAGE_MEDIA_TYPES: dict[str, ImageMediaType] = {
    "image/jpeg": "image/jpeg",
    "image/png": "image/png",
    "image/gif": "image/gif",
    "image/webp": "image/webp",
}


def attachment_blocks(turns: Sequence[Turn]) -> list[ContentBlockParam]:
    """The images and PDFs of `turns` as Messages API blocks, each after a line naming its
    message: URLs as URL sources (Claude fetches them; engram does not), data as base64."""
    blocks: list[ContentBlockParam] = []
    for turn in turns:
        part = turn.part
        if part is None or part.type not in (IMAGE, PDF):
            continue
        label = "image" if part.type == IMAGE else "PDF"
        blocks.append({"type": "text", "text": f"The {label} of message [{turn.position}]:"})
        if part.type == PDF:
            document: DocumentBlockParam = {
                "type": "document",
                "source": {"type": "url", "url": part.url},
            }
            blocks.append(document)
            continue
        image: ImageBlockParam = {"type": "image", "source": {"type": "url", "url": part.url}}
        if part.data:
            media_type = IMAGE_MEDIA_TYPES[part.media_type]
            image["source"] = {"type": "base64", "media_type": media_type, "data": part.data}
        blocks.append(image)
    return blocks
