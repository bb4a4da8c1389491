"""Request validation and response shapes of the Mem0-compatible memory API."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.actions import Message
from memory.filters import FilterError, compile_filters
from memory.models import SCOPE_FIELDS, SCOPE_MAX_LENGTH, Memory

ROLES = ("user", "assistant", "system", "tool")
MEMORY_TYPES = ("procedural_memory",)


def validate_filters(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise serializers.ValidationError("must be a JSON object.")
    try:
        compile_filters(value)
    except FilterError as exc:
        raise serializers.ValidationError(str(exc)) from None
    return value


def parse_query_filters(raw: str) -> dict[str, Any]:
    """`filters` in a query string: JSON, or the Python repr the mem0ai client sends."""
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(raw)
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, dict):
            return value
    raise serializers.ValidationError({"filters": "must be a JSON object."})


class ScopeIdField(serializers.CharField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            max_length=SCOPE_MAX_LENGTH,
            required=False,
            allow_null=True,
            allow_blank=False,
            **kwargs,
        )

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, bool) or not isinstance(data, str | int):
            self.fail("invalid")
        return super().to_internal_value(str(data))


class ScopeMixin(serializers.Serializer[dict[str, Any]]):
    """Scope ids top-level (user_id=…) or inside `filters` (the 2.x client's add)."""

    user_id = ScopeIdField()
    agent_id = ScopeIdField()
    app_id = ScopeIdField()
    run_id = ScopeIdField()

    def scope(self) -> dict[str, str | None]:
        return scope_of(self.validated_data)


def scope_of(data: dict[str, Any]) -> dict[str, str | None]:
    """Scope ids given top-level, or as plain values inside `filters`."""
    filters = data.get("filters") or {}
    scope: dict[str, str | None] = {}
    for field in SCOPE_FIELDS:
        value = data.get(field)
        if value is None and isinstance(filters.get(field), str | int):
            value = str(filters[field])
        scope[field] = value
    return scope


def validate_metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise serializers.ValidationError("must be a JSON object.")
    for key in value:
        if key in SCOPE_FIELDS:
            # Scope ids are columns, never metadata: Mem0 shipped the opposite as a tenant leak.
            raise serializers.ValidationError(
                f"{key!r} is a scope id and cannot be set through metadata; pass it as {key}."
            )
    return value


class MessageSerializer(serializers.Serializer[dict[str, Any]]):
    role = serializers.ChoiceField(choices=ROLES)
    content = serializers.CharField(allow_blank=False, trim_whitespace=False)
    name = serializers.CharField(required=False, allow_blank=True, max_length=SCOPE_MAX_LENGTH)

    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("must not be empty.")
        limit = settings.ENGRAM_MAX_MESSAGE_CHARS
        if len(value) > limit:
            raise serializers.ValidationError(f"is {len(value)} characters; the limit is {limit}.")
        return value


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "object", "properties": {
                "role": {"type": "string", "enum": list(ROLES)}, "content": {"type": "string"},
                "name": {"type": "string"}}, "required": ["role", "content"]}},
        ]
    }
)  # fmt: skip
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
        return [
            Message(m["role"], m["content"], m.get("name", "")) for m in messages.validated_data
        ]

    def to_representation(self, value: Any) -> Any:
        return value


class AddSerializer(ScopeMixin):
    messages = MessagesField()
    filters = serializers.JSONField(required=False, allow_null=True)
    metadata = serializers.JSONField(required=False, allow_null=True)
    infer = serializers.BooleanField(required=False, default=True)
    timestamp = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    expiration_date = serializers.DateField(required=False, allow_null=True)
    immutable = serializers.BooleanField(required=False, default=False)
    memory_type = serializers.CharField(required=False, allow_null=True)
    custom_instructions = serializers.CharField(required=False, allow_blank=True, max_length=20_000)
    custom_categories = serializers.JSONField(required=False, allow_null=True)
    includes = serializers.CharField(required=False, allow_blank=True, max_length=5_000)
    excludes = serializers.CharField(required=False, allow_blank=True, max_length=5_000)

    def validate_metadata(self, value: Any) -> dict[str, Any]:
        return validate_metadata(value)

    def validate_filters(self, value: Any) -> dict[str, Any]:
        if value is not None and not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object.")
        return value or {}

    def validate_memory_type(self, value: str | None) -> str | None:
        if value is not None and value not in MEMORY_TYPES:
            raise serializers.ValidationError(
                f"unknown memory_type {value!r}; allowed: {', '.join(MEMORY_TYPES)}."
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        scope = scope_of(attrs)
        if not any(scope.values()):
            raise serializers.ValidationError(
                "Give at least one of user_id, agent_id, app_id, run_id (top-level or in filters)."
            )
        if attrs.get("memory_type") and not scope.get("agent_id"):
            raise serializers.ValidationError(
                {"memory_type": "procedural_memory summarises an agent's steps: give agent_id."}
            )
        wildcard = [field for field, value in scope.items() if value == "*"]
        if wildcard:
            raise serializers.ValidationError(
                f"{wildcard[0]} '*' matches any value in filters; a memory needs a real id."
            )
        return attrs

    def event_payload(self, project_instructions: str, project_categories: Any) -> dict[str, Any]:
        """What a worker needs to process this request later (JSON only)."""
        data = self.validated_data
        expiration = data.get("expiration_date")
        return {
            "messages": [
                {"role": m.role, "content": m.content, "name": m.name} for m in data["messages"]
            ],
            "scope": self.scope(),
            "metadata": data.get("metadata") or {},
            "timestamp": data.get("timestamp"),
            "expiration_date": expiration.isoformat() if expiration else None,
            "immutable": data["immutable"],
            "custom_instructions": data.get("custom_instructions") or project_instructions,
            "custom_categories": category_names(
                data.get("custom_categories") or project_categories
            ),
            "includes": data.get("includes", ""),
            "excludes": data.get("excludes", ""),
            "memory_type": data.get("memory_type"),
        }

    def created_at(self) -> datetime | None:
        ts = self.validated_data.get("timestamp")
        return datetime.fromtimestamp(ts, tz=UTC) if ts is not None else None


def category_names(value: Any) -> list[str]:
    """Mem0 sends categories as names or as [{"name": "description"}]; keep the names."""
    names: list[str] = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, dict):
            names += [str(key) for key in item]
    return names


class SearchSerializer(ScopeMixin):
    query = serializers.CharField(trim_whitespace=True, max_length=4000)
    filters = serializers.JSONField(required=False, allow_null=True)
    top_k = serializers.IntegerField(required=False, default=20, min_value=1, max_value=1000)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=1000)
    threshold = serializers.FloatField(required=False, default=0.1, min_value=0, max_value=1)
    rerank = serializers.BooleanField(required=False, default=False)
    categories = serializers.ListField(child=serializers.CharField(), required=False)
    show_expired = serializers.BooleanField(required=False, default=False)

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)


class ListSerializer(ScopeMixin):
    filters = serializers.JSONField(required=False, allow_null=True)
    categories = serializers.ListField(child=serializers.CharField(), required=False)
    show_expired = serializers.BooleanField(required=False, default=False)
    start_date = serializers.DateTimeField(required=False)
    end_date = serializers.DateTimeField(required=False)

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)


class UpdateSerializer(serializers.Serializer[dict[str, Any]]):
    text = serializers.CharField(required=False, trim_whitespace=False)
    metadata = serializers.JSONField(required=False, allow_null=True)
    expiration_date = serializers.DateField(required=False, allow_null=True)
    timestamp = serializers.IntegerField(required=False, min_value=0)

    def validate_metadata(self, value: Any) -> dict[str, Any]:
        return validate_metadata(value)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # The 1.x clients call the new text "data".
        if isinstance(data, dict) and "text" not in data and "data" in data:
            data = {**data, "text": data["data"]}
        attrs: dict[str, Any] = super().to_internal_value(data)
        return attrs

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        text = attrs.get("text")
        if text is not None and not text.strip():
            raise serializers.ValidationError({"text": "must not be empty."})
        attrs["text"] = text
        return attrs


class BatchItemSerializer(serializers.Serializer[dict[str, Any]]):
    memory_id = serializers.UUIDField()
    text = serializers.CharField(required=False, trim_whitespace=False)
    metadata = serializers.JSONField(required=False, allow_null=True)

    def validate_metadata(self, value: Any) -> dict[str, Any] | None:
        return validate_metadata(value) if value is not None else None


class BatchSerializer(serializers.Serializer[dict[str, Any]]):
    memories = BatchItemSerializer(many=True, allow_empty=False, max_length=1000)  # type: ignore[call-arg]

    def validate_memories(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ids = [item["memory_id"] for item in value]
        if len(set(ids)) != len(ids):
            raise serializers.ValidationError("lists the same memory_id twice.")
        return value


class FeedbackSerializer(serializers.Serializer[dict[str, Any]]):
    memory_id = serializers.UUIDField()
    feedback = serializers.ChoiceField(
        choices=["POSITIVE", "NEGATIVE", "VERY_NEGATIVE"], required=False, allow_null=True
    )
    feedback_reason = serializers.CharField(required=False, allow_blank=True, allow_null=True)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict) and isinstance(data.get("feedback"), str):
            data = {**data, "feedback": data["feedback"].upper()}
        attrs: dict[str, Any] = super().to_internal_value(data)
        return attrs


class ExportSerializer(serializers.Serializer[dict[str, Any]]):
    schema = serializers.JSONField(required=False, default=dict)
    filters = serializers.JSONField(required=False, allow_null=True)

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)


class ExportGetSerializer(serializers.Serializer[dict[str, Any]]):
    memory_export_id = serializers.UUIDField(required=False)
    filters = serializers.JSONField(required=False, allow_null=True)


def memory_data(memory: Memory) -> dict[str, Any]:
    return {
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
        "categories": list(memory.categories),
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
