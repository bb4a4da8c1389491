"""An add's messages: their content (text, or one multimodal part of memory.parts), the
list's limits, and the parts checked against infer, the allowed hosts and the size limit.

May import memory.api.serializers.fields, memory.actions (Message), memory.parts,
memory.models, Django settings, DRF and drf-spectacular.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.actions import Message
from memory.api.serializers.fields import TextField
from memory.models import SCOPE_MAX_LENGTH
from memory.parts import (
    IMAGE,
    MAX_PARTS,
    MAX_URL_CHARS,
    PART_TYPES,
    Part,
    PartError,
    may_fetch,
    parse_part,
    refuse_fetch,
)

ROLES = ("user", "assistant", "system", "tool")


@dataclasses.dataclass(frozen=True)
class PartMessage(Message):
    """A message whose content is one multimodal part (memory.parts); `content` is the part's
    placeholder text. Only extraction (infer=true) reads parts."""

    part: Part = dataclasses.field(kw_only=True)


def _part_schema(kind: str) -> dict[str, Any]:
    inner = {"url": {"type": "string", "minLength": 1, "maxLength": MAX_URL_CHARS}}
    if kind == IMAGE:
        inner["detail"] = {"description": "OpenAI's image detail: accepted, ignored."}
    return {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": [kind]},
            kind: {
                "type": "object",
                "properties": inner,
                "required": ["url"],
                "additionalProperties": False,
            },
        },
        "required": ["type", kind],
        "additionalProperties": False,
    }


PART_SCHEMA = {
    "description": 'One multimodal part (infer=true only): {"type": T, T: {"url": ...}}.',
    "oneOf": [_part_schema(kind) for kind in PART_TYPES],
}


@extend_schema_field({"oneOf": [{"type": "string"}, PART_SCHEMA]})
class ContentField(serializers.Field):  # type: ignore[type-arg]
    """A message's content: text (TextField's rules), or one multimodal part object."""

    def to_internal_value(self, data: Any) -> str | Part:
        if isinstance(data, dict):
            try:
                return parse_part(data)
            except PartError as exc:
                raise serializers.ValidationError(str(exc)) from None
        text: str = TextField(allow_blank=False).run_validation(data)
        return text

    def to_representation(self, value: Any) -> Any:
        return value


class MessageSerializer(serializers.Serializer[dict[str, Any]]):
    role = serializers.ChoiceField(choices=ROLES)
    content = ContentField()
    name = serializers.CharField(required=False, allow_blank=True, max_length=SCOPE_MAX_LENGTH)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {
                "type": "array",
                "minItems": 1,
                "maxItems": settings.ENGRAM_MAX_MESSAGES,
                "items": {
                    "type": "object",
                    "properties": {
                        "role": {"type": "string", "enum": list(ROLES)},
                        "content": {"oneOf": [{"type": "string"}, PART_SCHEMA]},
                        "name": {"type": "string"},
                    },
                    "required": ["role", "content"],
                },
            },
        ]
    }
)
class MessagesField(serializers.Field):  # type: ignore[type-arg]
    """A list of {role, content}; a string or a single object is accepted like the clients do."""

    def to_internal_value(self, data: Any) -> list[Message]:
        if isinstance(data, str):
            data = [{"role": "user", "content": data}]
        elif isinstance(data, dict):
            data = [data]
        if not isinstance(data, list) or not data:
            raise serializers.ValidationError("must be a non-empty list of {role, content}.")
        if len(data) > settings.ENGRAM_MAX_MESSAGES:
            raise serializers.ValidationError(
                f"has {len(data)} messages; the limit is {settings.ENGRAM_MAX_MESSAGES}."
            )
        messages = MessageSerializer(data=data, many=True)
        if not messages.is_valid():
            raise serializers.ValidationError(messages.errors)
        parts = sum(isinstance(m["content"], Part) for m in messages.validated_data)
        if parts > MAX_PARTS:
            raise serializers.ValidationError(
                f"has {parts} content parts (image_url, pdf_url, txt_url, mdx_url); "
                f"the limit is {MAX_PARTS}."
            )
        return [
            PartMessage(m["role"], content.placeholder(), m.get("name", ""), part=content)
            if isinstance(content := m["content"], Part)
            else Message(m["role"], content, m.get("name", ""))
            for m in messages.validated_data
        ]

    def to_representation(self, value: Any) -> Any:
        return value


def validate_parts(messages: Sequence[Message], *, infer: bool) -> None:
    """Content parts need extraction (infer=true), and a document URL an allowed host."""
    for index, message in enumerate(messages):
        if not isinstance(message, PartMessage):
            continue
        part = message.part
        if not infer:
            problem = (
                f"{part.type} content needs infer=true: with infer=false messages are stored "
                "verbatim, and only text can be."
            )
            raise serializers.ValidationError({"messages": {str(index): {"content": [problem]}}})
        if part.is_document and part.url and not may_fetch(part.url):
            raise serializers.ValidationError(
                {"messages": {str(index): {"content": [refuse_fetch(part.url, part.type)]}}}
            )
    sent = sum(m.part.size for m in messages if isinstance(m, PartMessage) and m.part.is_document)
    if sent > settings.ENGRAM_MAX_DOCUMENT_BYTES:
        raise serializers.ValidationError(
            {
                "messages": [
                    f"the text documents sent as base64 are {sent} bytes together; the limit is "
                    f"{settings.ENGRAM_MAX_DOCUMENT_BYTES} (ENGRAM_MAX_DOCUMENT_BYTES)."
                ]
            }
        )
