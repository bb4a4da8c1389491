"""The field types and checks every request shares: stored text (TextField and the one
length-limit message), bounded JSON, scope ids, metadata (and an add's scope ids repeated in
it), Mem0's output_format, and the largest timestamp the API takes.

May import memory.models, Django, DRF and drf-spectacular; no other module of this package.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.models import SCOPE_FIELDS, SCOPE_MAX_LENGTH, metadata_error, scope_id_error

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


# The ids a client cannot put in a URL path: HTTP libraries remove "." and ".." segments (RFC
# 3986 dot segments; the WHATWG URL of fetch even when sent as %2E), so the official clients
# could not erase a user of such an id (DELETE /v2/entities/user/{id}/). An add refuses them.
DOT_SEGMENTS = (".", "..")


class ScopeIdField(serializers.CharField):
    """A scope id, by the rule of every entry point (memory.models.scope_id_error), after
    trimming the whitespace around it: " x " is the id "x". max_length only documents it in
    the schema.

    The one cleaning of every id a request names (top-level, inside `filters`, in a query
    string or a path: scope_id below), so an id is the same at add and at erasure. With
    `stored` (an add): also not "." or ".." (DOT_SEGMENTS), which no path can carry.
    """

    def __init__(self, *, stored: bool = False, **kwargs: Any) -> None:
        self.stored = stored
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(max_length=SCOPE_MAX_LENGTH, allow_blank=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, bool) or not isinstance(data, str | int):
            self.fail("invalid")
        value = super().to_internal_value(str(data))
        if (problem := scope_id_error(value)) is not None:
            raise serializers.ValidationError(problem)
        if self.stored and value in DOT_SEGMENTS:
            raise serializers.ValidationError(
                f"must not be {value!r}: HTTP clients drop '.' and '..' from URL paths, so "
                "this id could not be erased through the API."
            )
        return value


class ScopeIdError(ValueError):
    """An id no memory can have; the message is the reason ("must not be empty or only …")."""


def scope_id(value: Any) -> str:
    """`value` as an add stores it (ScopeIdField: trimmed, then 1 to 255 characters), for
    every id a request names outside a serializer's own fields: a path, a query string, an
    operand of `filters`. Raises ScopeIdError."""
    try:
        cleaned: str = ScopeIdField(allow_null=False).run_validation(value)
    except serializers.ValidationError as exc:
        if exc.get_codes() == ["blank"]:  # worded as scope_id_error words an empty id
            raise ScopeIdError("must not be empty or only whitespace.") from None
        detail = exc.detail
        raise ScopeIdError(str(detail[0] if isinstance(detail, list) else detail)) from None
    return cleaned


def validate_metadata(value: Any, *, scope_ids: bool = False) -> dict[str, Any]:
    """A memory's metadata: a JSON object without scope ids (memory.models.metadata_error).
    With `scope_ids` (an add), scope ids are let through, for the add to judge them against
    its own (own_scope_dropped)."""
    if value is None:
        return {}
    checked = value
    if scope_ids and isinstance(value, dict):
        checked = {key: item for key, item in value.items() if key not in SCOPE_FIELDS}
    if (problem := metadata_error(checked)) is not None:
        raise serializers.ValidationError(problem)
    return dict(value)


def own_scope_dropped(metadata: dict[str, Any], scope: dict[str, str | None]) -> dict[str, Any]:
    """An add's `metadata` without the scope ids that repeat the request's own `scope`
    (PraisonAI sends metadata={"user_id": U} beside user_id=U): the ids are columns, so nothing
    is lost. A scope id that differs (cleaned as ScopeIdField cleans it: " U " is U), or that
    the request does not name, is a ValidationError keyed `metadata`."""
    kept: dict[str, Any] = {}
    for key, value in metadata.items():
        if key not in SCOPE_FIELDS:
            kept[key] = value
            continue
        own = scope.get(key)
        if own is None:
            raise serializers.ValidationError({"metadata": metadata_error({key: value})})
        try:
            same = ScopeIdField(stored=True).run_validation(value) == own
        except serializers.ValidationError:
            same = False
        if not same:
            raise serializers.ValidationError(
                {
                    "metadata": f"{key!r} is a scope id and cannot be set through metadata: "
                    f"{value!r} differs from the request's {key} {own!r} (metadata may repeat "
                    "it, not change it)."
                }
            )
    return kept


# Mem0's response envelopes (`output_format`) on its v1 and v2 paths: "v1.0", their default, a
# bare list; "v1.1" an object, {"results": [...]}.
OUTPUT_FORMATS = ("v1.0", "v1.1")


class OutputFormatField(serializers.ChoiceField):
    """Mem0's `output_format`: the envelope of a v1 or v2 answer (OUTPUT_FORMATS)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(choices=OUTPUT_FORMATS, **kwargs)
