"""Exports: the request that creates one (a schema and filters) and the one that reads it.

May import memory.api.serializers.fields and .filters, DRF and drf-spectacular.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.api.serializers.fields import BoundedJSONField
from memory.api.serializers.filters import compiled, normalised_filters, validate_filters


# Any JSON value but null (OpenAPI 3.0 has no "null" type to exclude, so the others are listed).
@extend_schema_field(
    {"anyOf": [{"type": kind} for kind in ("object", "array", "string", "number", "boolean")]}
)
class NonNullJSONField(BoundedJSONField):
    pass


class ExportSerializer(serializers.Serializer[dict[str, Any]]):
    schema = NonNullJSONField(required=False, default=dict)
    filters = serializers.JSONField(required=False, allow_null=True)

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["where"] = compiled(attrs.get("filters") or {})
        return attrs


class ExportGetSerializer(serializers.Serializer[dict[str, Any]]):
    memory_export_id = serializers.UUIDField(required=False)
    filters = BoundedJSONField(required=False, allow_null=True)

    def validate_filters(self, value: Any) -> Any:
        # As an export stores them (ExportSerializer), to find the one made with them.
        return normalised_filters(value)
