"""A project's API calls, counted from its access log: per day, and per endpoint with their
latency. What the Usage page shows beside the models' tokens.

Every API and MCP request has one AccessLog row (audit.access), refused ones included, so these
counts are every call the project's keys made: adds with infer=false, searches, lists, deletes.
Reads run in the caller's tenant context (row-level security: the project's rows only) and
use the log's (project, created_at) index; each is one GROUP BY statement.

May import audit.models and Django; no other module of this package.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db.models import Aggregate, Avg, Count, FloatField, Q
from django.db.models.functions import TruncDate

from audit.models import AccessLog

ENDPOINTS_SHOWN = 50  # endpoints in the per-endpoint table, the most called first


class Percentile(Aggregate):
    """PostgreSQL's percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: str, fraction: float) -> None:
        if not 0 <= fraction <= 1:
            raise ValueError("a percentile's fraction is between 0 and 1")
        super().__init__(expression, fraction=float(fraction))


def _counts() -> dict[str, Any]:
    return {
        "calls": Count("id"),
        "client_errors": Count("id", filter=Q(status__gte=400, status__lt=500)),
        "server_errors": Count("id", filter=Q(status__gte=500)),
    }


def calls_per_day(project_id: uuid.UUID, *, since: datetime) -> list[dict[str, Any]]:
    """The project's API calls from `since`, per day (current time zone), newest first: day,
    calls, client_errors (4xx), server_errors (5xx)."""
    rows = (
        AccessLog.objects.filter(project_id=project_id, created_at__gte=since)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(**_counts())
        .order_by("-day")
    )
    return list(rows)


def calls_per_endpoint(
    project_id: uuid.UUID, *, since: datetime, limit: int = ENDPOINTS_SHOWN
) -> list[dict[str, Any]]:
    """The project's API calls from `since` per endpoint (method and route name, or the MCP
    tool), the most called first, then by name: method, action, calls, client_errors,
    server_errors, mean_ms, p50_ms, p95_ms (the server's time for the request)."""
    rows = (
        AccessLog.objects.filter(project_id=project_id, created_at__gte=since)
        .values("method", "action")
        .annotate(
            **_counts(),
            mean_ms=Avg("duration_ms"),
            p50_ms=Percentile("duration_ms", 0.5),
            p95_ms=Percentile("duration_ms", 0.95),
        )
        .order_by("-calls", "action", "method")[:limit]
    )
    return list(rows)
