"""The graph reads (GET /v1/graph/ and the traversal): scope ids and filters merged as search
reads them, depth and limit as JSON integers.

May import memory.api.serializers.fields and .filters, memory.graph (its limits) and DRF.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from memory.api.serializers.fields import TextField
from memory.api.serializers.filters import ScopeMixin, merged_filters, validate_filters
from memory.graph import MAX_DEPTH, MAX_LIMIT


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only: not a string of digits, a boolean or a float (2.0)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        value: int = super().to_internal_value(data)
        return value


class GraphFilterMixin(ScopeMixin):
    """The graph reads: scope ids top-level or in `filters`, merged (memory.queries.graph_edges
    reads them the way search does); valid relations only unless include_invalid."""

    filters = serializers.JSONField(required=False, allow_null=True)
    include_invalid = serializers.BooleanField(required=False, default=False)

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["filters"] = merged_filters(attrs)
        return attrs


class GraphTraverseSerializer(GraphFilterMixin):
    entity = TextField(help_text="The entity's name (matched normalised: case and spaces).")
    depth = StrictIntegerField(
        required=False, default=1, min_value=1, max_value=MAX_DEPTH, help_text="Hops, 1-3."
    )
    limit = StrictIntegerField(
        required=False, default=50, min_value=1, max_value=MAX_LIMIT, help_text="Relations."
    )


class GraphListSerializer(GraphFilterMixin):
    """GET /v1/graph/: the query string's scope ids, filters (parsed) and include_invalid."""
