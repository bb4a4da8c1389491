"""Scope ids and filters: a request's scope ids top-level or inside `filters` (ScopeMixin,
scope_of), the two merged, filters compiled once while validating (memory.retrieval.filters),
scope ids and `filters` of a query string.

May import memory.api.serializers.fields, memory.models, memory.retrieval.filters,
config.inputs, Django and DRF.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from rest_framework import serializers

from config.inputs import UnsafeInputError, parse_json, parse_python_literal
from memory.api.serializers.fields import ScopeIdField
from memory.models import SCOPE_FIELDS, scope_id_error
from memory.retrieval.filters import FilterError, compile_filters


def validate_filters(value: Any) -> dict[str, Any]:
    """A filter object's shape (compiled later, once, with the request's scope ids)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise serializers.ValidationError("must be a JSON object.")
    return value


def compiled(filters: dict[str, Any]) -> Q:
    try:
        return compile_filters(filters)
    except FilterError as exc:
        raise serializers.ValidationError({"filters": str(exc)}) from None


def compiled_scope_ids(ids: dict[str, str]) -> Q:
    """Scope ids of a query string (DELETE /v1/memories/?user_id=…), by the filters' rules:
    each one named equal ("*": set to anything), the others not tested."""
    for field, value in ids.items():
        if (problem := scope_id_error(value)) is not None:
            raise serializers.ValidationError({field: problem})
    try:
        return compile_filters(ids, exact_scope=False)
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
    return value


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
