"""POST /v1/summary/ (the Python client's get_summary(filters)): the running summaries of the
scopes the filters match.

The Platform answers a list; engram's entries are the summaries extraction keeps of each
scope's conversation (memory.models.ScopeSummary, refreshed every ENGRAM_SUMMARY_EVERY
processed add requests), one per scope, the most recent first. A summary has scope ids and a
time, nothing else: a filter on any other field (categories, metadata, …) is a 400 naming it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory.api import responses as r
from memory.api.common import tenant
from memory.api.serializers.fields import BoundedJSONField
from memory.api.serializers.filters import compiled, validate_filters
from memory.models import SCOPE_FIELDS
from memory.queries.summaries import scope_summaries
from memory.retrieval.filters import LOGICAL, MAX_DEPTH, scope_values
from tenants.api import Closed

MAX_SUMMARIES = 100  # one per scope; a filter matching more answers the most recent
SUMMARY_FIELDS = (*SCOPE_FIELDS, "updated_at")


def foreign_field(filters: Any, depth: int = 0) -> str | None:
    """The first key of `filters` a summary does not have, or None."""
    if depth > 2 * MAX_DEPTH + 4:
        return None  # the compiler refuses it as too deep
    items = filters if isinstance(filters, list) else [filters]
    for item in items:
        if not isinstance(item, dict):
            continue
        for key, value in item.items():
            if key in LOGICAL:
                found = foreign_field(value, depth + 1)
                if found:
                    return found
            elif key not in SUMMARY_FIELDS:
                return str(key)
    return None


class SummaryRequestSerializer(serializers.Serializer[dict[str, Any]]):
    filters = BoundedJSONField(
        required=False,
        help_text="The scopes, in the filter language of the other endpoints, on user_id, "
        'agent_id, app_id, run_id and updated_at: {"user_id": "alice"} is every summary of '
        'Alice\'s (with an agent, an app or a run too), {"user_id": "alice", "NOT": '
        '{"agent_id": "*"}} those without an agent, {"user_id": "*"} every user\'s. Left out '
        "(the client's get_summary() without filters): every scope's, the most recent first.",
    )

    def validate_filters(self, value: Any) -> dict[str, Any]:
        filters = validate_filters(value)
        field = foreign_field(filters)
        if field is not None:
            raise serializers.ValidationError(
                f"a summary has no {field!r}; filter summaries by {', '.join(SUMMARY_FIELDS)}."
            )
        return filters

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("filters", {})
        attrs["where"] = compiled(attrs["filters"]) if attrs["filters"] else Q()
        return attrs


class SummarySerializer(Closed):
    user_id = serializers.CharField(allow_null=True)
    agent_id = serializers.CharField(allow_null=True)
    app_id = serializers.CharField(allow_null=True)
    run_id = serializers.CharField(allow_null=True)
    summary = serializers.CharField(help_text="The scope's conversation so far, in prose.")
    updated_at = serializers.DateTimeField(help_text="When the last request folded in ended.")


@extend_schema(
    request=SummaryRequestSerializer,
    responses=r.answers({200: SummarySerializer(many=True)}, body=True),
    parameters=[r.RETRY_AFTER],
    summary="The running summaries of the scopes matching filters",
)
@api_view(["POST"])
def summary(request: Request) -> Response:
    serializer = SummaryRequestSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    with tenant(request) as project_id:
        found = scope_summaries(project_id, data["where"], limit=MAX_SUMMARIES)
        note_access(request, scope=scope_values(data["filters"]), result_count=len(found))
    return Response(
        [
            {**row.scope, "summary": row.text, "updated_at": row.updated_at.isoformat()}
            for row in found
        ]
    )
