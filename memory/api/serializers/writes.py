"""Changes to memories: delete's query string, update, batch update and delete (and the
batch's schema extension), feedback.

May import memory.api.serializers.fields, DRF and drf-spectacular.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import Direction
from rest_framework import serializers

from memory.api.serializers.fields import (
    MAX_TIMESTAMP,
    JSONObjectField,
    TextField,
    validate_metadata,
)


class DeleteSerializer(serializers.Serializer[dict[str, Any]]):
    """DELETE /v1/memories/{id}/'s query string."""

    delete_linked = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also delete, transitively, the memories this one superseded "
        "(`linked_memory_ids`); the answer then carries `cascade_count`.",
    )


class UpdateSerializer(serializers.Serializer[dict[str, Any]]):
    text = TextField(required=False)
    metadata = JSONObjectField(required=False, allow_null=True)
    expiration_date = serializers.DateField(required=False, allow_null=True)
    timestamp = serializers.IntegerField(required=False, min_value=0, max_value=MAX_TIMESTAMP)

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
    text = TextField(required=False, allow_blank=False)
    metadata = JSONObjectField(required=False, allow_null=True)

    def validate_metadata(self, value: Any) -> dict[str, Any] | None:
        return validate_metadata(value) if value is not None else None


class BatchSerializer(serializers.Serializer[dict[str, Any]]):
    memories = BatchItemSerializer(many=True, allow_empty=False, max_length=1000)  # type: ignore[call-arg]

    def validate_memories(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ids = [item["memory_id"] for item in value]
        if len(set(ids)) != len(ids):
            raise serializers.ValidationError("lists the same memory_id twice.")
        return value


class BatchSchema(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """The batch's size limits, which drf-spectacular does not read off a ListSerializer."""

    target_class = BatchSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(  # type: ignore[no-untyped-call]
            self.target, direction, bypass_extensions=True
        )
        memories = self.target.fields["memories"]
        schema["properties"]["memories"] |= {"minItems": 1, "maxItems": memories.max_length}
        return schema


class FeedbackSerializer(serializers.Serializer[dict[str, Any]]):
    memory_id = serializers.UUIDField()
    feedback = serializers.ChoiceField(
        choices=["POSITIVE", "NEGATIVE", "VERY_NEGATIVE"], required=False, allow_null=True
    )
    feedback_reason = TextField(required=False, allow_blank=True, allow_null=True)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict) and isinstance(data.get("feedback"), str):
            data = {**data, "feedback": data["feedback"].upper()}
        attrs: dict[str, Any] = super().to_internal_value(data)
        return attrs
