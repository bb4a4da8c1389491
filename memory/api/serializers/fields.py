"""The field types and checks every request shares: stored text (TextField and the one
length-limit message), bounded JSON, scope ids, metadata, and the largest timestamp the API takes.

May import memory.models, Django, DRF and drf-spectacular; no other module of this package.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.models import SCOPE_MAX_LENGTH, metadata_error, scope_id_error

# 9999-12-31T23:59:59Z: the last moment a Python datetime (and so the API) can represent.
MAX_TIMESTAMP = 253_402_300_799


def too_long(length: int, unit: str = "characters") -> serializers.ValidationError:
    """The one message for every length limit (ENGRAM_MAX_TEXT_CHARS)."""
    limit = settings.ENGRAM_MAX_TEXT_CHARS
    return serializers.ValidationError(f"is {length} {unit}; the limit is {limit}.")


class TextField(serializers.CharField):
    """Text that is stored: not whitespace only, at most ENGRAM_MAX_TEXT_CHARS characters.

    (NUL characters and lone surrogates never get here: config.inputs refuses them.)
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if value and not value.strip():
            raise serializers.ValidationError("must not be only whitespace.")
        if len(value) > settings.ENGRAM_MAX_TEXT_CHARS:
            raise too_long(len(value))
        return value


class BoundedJSONField(serializers.JSONField):
    """A JSON value whose text is at most ENGRAM_MAX_TEXT_CHARS characters."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        length = len(json.dumps(value, ensure_ascii=False))
        if length > settings.ENGRAM_MAX_TEXT_CHARS:
            raise too_long(length, "characters of JSON")
        return value


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JSONObjectField(BoundedJSONField):
    """Documented as a JSON object; the serializer's validate_<field> refuses anything else."""


class ScopeIdField(serializers.CharField):
    """A scope id, by the rule of every entry point (memory.models.scope_id_error); max_length
    only documents it in the schema."""

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
        value = super().to_internal_value(str(data))
        if (problem := scope_id_error(value)) is not None:
            raise serializers.ValidationError(problem)
        return value


def validate_metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if (problem := metadata_error(value)) is not None:
        raise serializers.ValidationError(problem)
    return dict(value)
