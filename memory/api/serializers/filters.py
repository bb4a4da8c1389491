"""Scope ids and filters: a request's scope ids top-level or inside `filters` (ScopeMixin,
scope_of), the two merged, filters compiled once while validating (memory.retrieval.filters),
scope ids and `filters` of a query string. Every scope id a filter names is cleaned as an add
stores it (normalised_filters, by fields.scope_id): {"user_id": " x "} reads the user "x".

May import memory.api.serializers.fields, memory.models, memory.retrieval.filters,
config.inputs, Django and DRF.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from rest_framework import serializers

from config.inputs import UnsafeInputError, parse_json, parse_python_literal
from memory.api.serializers.fields import ScopeIdError, ScopeIdField, scope_id
from memory.models import SCOPE_FIELDS
from memory.retrieval.filters import LOGICAL, MAX_DEPTH, WILDCARD, FilterError, compile_filters


def validate_filters(value: Any) -> dict[str, Any]:
    """A filter object's shape, its scope ids cleaned (normalised_filters); compiled later,
    once, with the request's scope ids."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise serializers.ValidationError("must be a JSON object.")
    normalised: dict[str, Any] = normalised_filters(value)
    return normalised


def normalised_filters(filters: Any, depth: int = 0) -> Any:
    """`filters` with each scope id it names as an add stores it (fields.scope_id: " x " is
    "x"): a scope field's value and its eq, ne and `in` operands, inside AND, OR and NOT too.

    "*" (any value) stays; " * " is refused rather than read as "*": an id with spaces is
    never a wildcard. Everything else is left for the compiler to judge (memory.retrieval
    .filters), which refuses what is deeper than its limit. Raises ValidationError with one
    message naming the field (a serializer's validate_filters keys it as `filters`)."""
    if depth > 2 * MAX_DEPTH + 4 or not isinstance(filters, dict):
        return filters
    result: dict[str, Any] = {}
    for key, value in filters.items():
        if key in SCOPE_FIELDS:
            result[key] = _scope_condition(key, value)
        elif key in LOGICAL and isinstance(value, list):
            result[key] = [normalised_filters(item, depth + 1) for item in value]
        elif key in LOGICAL:
            result[key] = normalised_filters(value, depth + 1)
        else:
            result[key] = value
    return result


def _scope_condition(field: str, value: Any) -> Any:
    try:
        if not isinstance(value, dict):
            return scope_operand(value, wildcard=True)
        cleaned = dict(value)
        for op in ("eq", "ne"):
            if op in cleaned:
                cleaned[op] = scope_operand(cleaned[op], wildcard=op == "eq")
        if isinstance(cleaned.get("in"), list):
            cleaned["in"] = [scope_operand(item, wildcard=False) for item in cleaned["in"]]
        return cleaned
    except ScopeIdError as exc:
        raise serializers.ValidationError(f"{field} {exc}") from None


def scope_operand(value: Any, *, wildcard: bool) -> Any:
    """One scope id of a filter or a query string cleaned (fields.scope_id); "*" as it is, and
    what is no id at all (null, a list) too, for the compiler to refuse. With `wildcard` (an
    equality, where "*" means any value), " * " is refused (ScopeIdError), not read as "*"."""
    if value == WILDCARD or isinstance(value, bool) or not isinstance(value, str | int):
        return value
    cleaned = scope_id(value)
    if wildcard and cleaned == WILDCARD:
        raise ScopeIdError(f"{value!r} is not '*' (any value): write the wildcard without spaces.")
    return cleaned


def compiled(filters: dict[str, Any]) -> Q:
    try:
        return compile_filters(filters)
    except FilterError as exc:
        raise serializers.ValidationError({"filters": str(exc)}) from None


def cleaned_scope_ids(ids: dict[str, str]) -> dict[str, str]:
    """Scope ids of a query string, each cleaned as an add stores it (" x " is "x"), "*" as
    it is; an id no memory can have (empty, only whitespace, " * ") is a 400 naming it."""
    cleaned: dict[str, str] = {}
    for field, value in ids.items():
        try:
            cleaned[field] = scope_operand(value, wildcard=True)
        except ScopeIdError as exc:
            raise serializers.ValidationError({field: str(exc)}) from None
    return cleaned


def compiled_scope_ids(ids: dict[str, str]) -> Q:
    """Scope ids of a query string (DELETE /v1/memories/?user_id=…), by the filters' rules:
    each one named equal ("*": set to anything), the others not tested; each cleaned
    (cleaned_scope_ids)."""
    try:
        return compile_filters(cleaned_scope_ids(ids))
    except FilterError as exc:
        raise serializers.ValidationError(str(exc)) from None


def parse_query_filters(raw: str) -> dict[str, Any]:
    """`filters` in a query string: JSON, or the Python dict repr the mem0ai client sends."""
    try:
        value = parse_json(raw, "filters")
    except UnsafeInputError:
        try:
            value = parse_python_literal(raw, "filters")
        except UnsafeInputError as exc:
            raise serializers.ValidationError(
                {"filters": f"must be a JSON object (or a Python dict literal): {exc}"}
            ) from None
    if not isinstance(value, dict):
        raise serializers.ValidationError({"filters": "must be a JSON object."})
    try:
        return validate_filters(value)
    except serializers.ValidationError as exc:
        raise serializers.ValidationError({"filters": exc.detail}) from None


class ScopeMixin(serializers.Serializer[dict[str, Any]]):
    """Scope ids top-level (user_id=…) or inside `filters` (the 2.x client's add)."""

    user_id = ScopeIdField()
    agent_id = ScopeIdField()
    app_id = ScopeIdField()
    run_id = ScopeIdField()

    def scope(self) -> dict[str, str | None]:
        return scope_of(self.validated_data)

    def where(self) -> Q:
        """The compiled condition: `filters` plus the top-level scope ids (set by validate)."""
        query: Q = self.validated_data["where"]
        return query


def merged_filters(data: dict[str, Any]) -> dict[str, Any]:
    """`filters` with the top-level scope ids added (a filter's own value wins)."""
    filters = dict(data.get("filters") or {})
    for field in SCOPE_FIELDS:
        value = data.get(field)
        if value is not None and field not in filters:
            filters[field] = value
    return filters


class FilteredMixin(ScopeMixin):
    """Search, list and export: compile the filters once, while validating."""

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["where"] = compiled(merged_filters(attrs))
        return attrs


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
