"""Search and list: their options (Mem0's read flags, reference_date, categories, dates,
output_format) over the filters FilteredMixin compiles.

May import memory.api.serializers.fields and .filters, memory.models, memory.search
(DEFAULT_THRESHOLD), memory.text.temporal, DRF and drf-spectacular.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.api.serializers.fields import OutputFormatField
from memory.api.serializers.filters import FilteredMixin, validate_filters
from memory.models import SCOPE_MAX_LENGTH
from memory.search import DEFAULT_THRESHOLD
from memory.text.temporal import LATEST_EPOCH, reference_moment


class ReadFlagsMixin(serializers.Serializer[dict[str, Any]]):
    """Mem0's read flags over superseded and merged memories (search and list alike)."""

    latest_only = serializers.BooleanField(
        required=False,
        default=True,
        help_text="True (engram's default): active memories only. False: also the memories an "
        "update superseded, each with lifecycle_state `superseded` and `replaced_by`.",
    )
    include_merged = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Accepted for Mem0 clients; no effect: engram never merges memories.",
    )


@extend_schema_field(
    {
        "oneOf": [
            {"type": "number", "minimum": 0, "maximum": LATEST_EPOCH},
            {"type": "string", "format": "date"},
            {"type": "string", "format": "date-time"},
        ],
        "nullable": True,
    }
)
class ReferenceDateField(serializers.Field):  # type: ignore[type-arg]
    """Mem0's `reference_date`: epoch seconds, a date or an ISO datetime (memory.retrieval
    .temporal.reference_moment)."""

    def to_internal_value(self, data: Any) -> datetime:
        try:
            return reference_moment(data)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from error

    def to_representation(self, value: Any) -> Any:
        return value


class SearchSerializer(ReadFlagsMixin, FilteredMixin):
    query = serializers.CharField(trim_whitespace=True, max_length=4000)
    filters = serializers.JSONField(required=False, allow_null=True)
    top_k = serializers.IntegerField(required=False, default=20, min_value=1, max_value=1000)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=1000)
    threshold = serializers.FloatField(
        required=False, default=DEFAULT_THRESHOLD, min_value=0, max_value=1
    )
    rerank = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Have the deployment's reranker (ENGRAM_RERANK: a reranker service, or the "
        "extraction model as a judge) reorder the best ENGRAM_RERANK_TOP_N results, then cut "
        "to top_k; the answer says whether it did (`reranked`, header Engram-Reranked). "
        "No reranker configured, or one that fails: the fused order. docs/rerank.md.",
    )
    categories = serializers.ListField(
        child=serializers.CharField(max_length=SCOPE_MAX_LENGTH), required=False, max_length=100
    )
    show_expired = serializers.BooleanField(required=False, default=False)
    reference_date = ReferenceDateField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The 'now' of temporal expressions in the query ('last week', 'in May', "
        "'3 days ago'): epoch seconds, a date (YYYY-MM-DD) or an ISO datetime; default now. "
        "Memories whose event time falls outside the window the query names rank lower.",
    )
    enable_graph = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also answer with `relations`: the graph's relations behind the results and "
        "those touching entities the query names; the answer is then an object on every version.",
    )
    keyword_search = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Accepted for Mem0 clients; no effect: every search already ranks by keywords "
        "as well as by meaning (what Mem0's flag turns on).",
    )
    output_format = OutputFormatField(
        help_text='On v1 and v2: "v1.0" (the default there) answers a bare list, "v1.1" an '
        'object {"results": [...], "relations": [...]} (relations empty without enable_graph). '
        "No effect on v3, which always answers an object."
    )

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)


class ListSerializer(ReadFlagsMixin, FilteredMixin):
    filters = serializers.JSONField(required=False, allow_null=True)
    categories = serializers.ListField(
        child=serializers.CharField(max_length=SCOPE_MAX_LENGTH), required=False, max_length=100
    )
    show_expired = serializers.BooleanField(required=False, default=False)
    start_date = serializers.DateTimeField(required=False)
    end_date = serializers.DateTimeField(required=False)
    output_format = OutputFormatField(
        help_text='On v1 and v2 without page or page_size: "v1.0" (the default there) answers a '
        'bare list, "v1.1" an object {"results": [...]}. A page is always an object; no effect '
        "on v3."
    )

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)
