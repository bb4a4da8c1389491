"""The context block's request and answer (POST /v1/context/ and the MCP tool get_context):
what memory.api.context and memory.mcp.tools share.

May import memory.api.serializers.filters and .reads, memory.context, memory.search
(DEFAULT_THRESHOLD), tenants.api and DRF.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from memory import context
from memory.api.serializers.filters import FilteredMixin, validate_filters
from memory.api.serializers.reads import ReferenceDateField
from memory.search import DEFAULT_THRESHOLD
from tenants.api import Closed

MAX_TOKENS = 8000


class ContextRequestSerializer(FilteredMixin):
    query = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        max_length=4000,
        help_text="What the agent is about to answer. Without one (or blank): the scope's newest "
        "memories, its profile and its summary.",
    )
    filters = serializers.JSONField(required=False, allow_null=True)
    max_tokens = serializers.IntegerField(
        required=False,
        default=400,
        min_value=64,
        max_value=MAX_TOKENS,
        help_text="The block's budget, in tokens as engram counts them (an approximation that "
        "counts above Claude's and OpenAI's tokenizers: docs/context.md).",
    )
    top_k = serializers.IntegerField(required=False, default=20, min_value=1, max_value=100)
    threshold = serializers.FloatField(
        required=False, default=DEFAULT_THRESHOLD, min_value=0, max_value=1
    )
    reference_date = ReferenceDateField(required=False, allow_null=True, default=None)
    format = serializers.ChoiceField(
        choices=["text", "json"],
        required=False,
        default="text",
        help_text="text: the block and the ids it used; json: also each part.",
    )

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)


class ContextPartSerializer(Closed):
    kind = serializers.ChoiceField(choices=["profile", "memory", "relation", "summary"])
    text = serializers.CharField(help_text="The part's line, as fenced in the block.")
    tokens = serializers.IntegerField()
    memory_id = serializers.UUIDField(allow_null=True)
    score = serializers.FloatField(allow_null=True)


class ContextSerializer(Closed):
    # DRF's metaclass pops declared fields off the class: no clash with Serializer.context.
    context = serializers.CharField(  # type: ignore[assignment]
        help_text="The block, to paste into the prompt as it is."
    )
    memory_ids = serializers.ListField(
        child=serializers.UUIDField(), help_text="The memories in the block, in its order."
    )
    tokens = serializers.IntegerField(help_text="The block's tokens, as engram counts them.")
    max_tokens = serializers.IntegerField()
    nothing_relevant = serializers.BooleanField(
        help_text="Nothing passed the threshold: the block is only the sentence saying so."
    )
    language = serializers.CharField(help_text="The language of the block's fixed sentences.")
    parts = ContextPartSerializer(many=True, required=False, help_text="With format json.")


def context_body(block: context.Block, *, parts: bool) -> dict[str, Any]:
    """The answer's body (ContextSerializer); `parts` with format json."""
    answer: dict[str, Any] = {
        "context": block.text,
        "memory_ids": [str(i) for i in block.memory_ids],
        "tokens": block.tokens,
        "max_tokens": block.max_tokens,
        "nothing_relevant": block.nothing_relevant,
        "language": block.language,
    }
    if parts:
        answer["parts"] = [
            {
                "kind": p.kind,
                "text": p.text,
                "tokens": p.tokens,
                "memory_id": str(p.memory_id) if p.memory_id else None,
                "score": None if p.score is None else round(p.score, 6),
            }
            for p in block.parts
        ]
    return answer
