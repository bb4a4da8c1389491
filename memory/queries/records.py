"""The records of requests: add requests (events) and their model usage per day, reranked
searches' usage per day, exports,
Idempotency-Keys and erasure requests.

May import memory.models, audit.models and Django; no other module of this package.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import BigIntegerField, Count, F, QuerySet, Sum, TextField, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, TruncDate

from audit.models import ErasureRequest
from memory.models import IdempotentRequest, MemoryEvent, MemoryExport, RerankUsageDay, UsageDay


def idempotent_request(project_id: uuid.UUID, key: str) -> IdempotentRequest | None:
    """The project's record of an Idempotency-Key, expired or not (by the unique index)."""
    return IdempotentRequest.objects.filter(project_id=project_id, key=key).first()


def events(
    project_id: uuid.UUID,
    status: str | None = None,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
) -> QuerySet[MemoryEvent]:
    """The project's add requests, newest first, optionally of one status, one user and one
    agent."""
    found = MemoryEvent.objects.filter(project_id=project_id)
    if status:
        found = found.filter(status=status)
    if user_id:
        found = found.filter(user_id=user_id)
    if agent_id:
        found = found.filter(agent_id=agent_id)
    return found.order_by("-created_at", "-id")


def _usage_total(key: str) -> Coalesce:
    return Coalesce(Sum(Cast(KT(f"usage__{key}"), BigIntegerField())), 0)


def usage_per_day(project_id: uuid.UUID, *, since: datetime) -> list[dict[str, Any]]:
    """Add requests created from `since` and their model usage (MemoryEvent.usage), per day
    (in the current time zone, UTC), newest first: day, events, calls, input_tokens,
    output_tokens. The requests no longer kept (erased with their user, purged after the
    retention period) count through their folded totals (UsageDay), so a day's figures never
    shrink. Two GROUP BY queries; events without usage (offline, pending) count 0."""
    keys = ("events", "calls", "input_tokens", "output_tokens")
    kept = (
        MemoryEvent.objects.filter(project_id=project_id, created_at__gte=since)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(**_usage_sums())
    )
    days: dict[Any, dict[str, Any]] = {row["day"]: dict(row) for row in kept}
    folded = UsageDay.objects.filter(project_id=project_id, day__gte=since.date())
    for row in folded.values("day", *keys):
        day = days.setdefault(row["day"], {"day": row["day"], **dict.fromkeys(keys, 0)})
        for key in keys:
            day[key] += row[key]
    return sorted(days.values(), key=lambda row: row["day"], reverse=True)


MODEL_USAGE_KEYS = (
    "events",
    "calls",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def model_usage_per_day(project_id: uuid.UUID, *, since: datetime) -> list[dict[str, Any]]:
    """What add requests created from `since` used per day (current time zone) and per model
    (MemoryEvent.usage's `model`, "" when none was recorded: the offline extractor, usage
    recorded before the model was, and the folded totals of requests no longer kept), newest
    day first, then by model: day, model and MODEL_USAGE_KEYS. Two GROUP BY queries."""
    kept = (
        MemoryEvent.objects.filter(project_id=project_id, created_at__gte=since)
        .annotate(
            day=TruncDate("created_at"),
            model=Coalesce(KT("usage__model"), Value(""), output_field=TextField()),
        )
        .values("day", "model")
        .annotate(
            **_usage_sums(),
            cache_creation_input_tokens=_usage_total("cache_creation_input_tokens"),
            cache_read_input_tokens=_usage_total("cache_read_input_tokens"),
        )
    )
    rows: dict[tuple[Any, str], dict[str, Any]] = {(r["day"], r["model"]): dict(r) for r in kept}
    folded = UsageDay.objects.filter(project_id=project_id, day__gte=since.date())
    for row in folded.values("day", "events", "calls", "input_tokens", "output_tokens"):
        day = rows.setdefault(
            (row["day"], ""), {"day": row["day"], "model": "", **dict.fromkeys(MODEL_USAGE_KEYS, 0)}
        )
        for key in ("events", "calls", "input_tokens", "output_tokens"):
            day[key] += row[key]
    return sorted(rows.values(), key=lambda r: (-r["day"].toordinal(), r["model"]))


RERANK_USAGE_KEYS = ("searches", "reranked", "calls", "input_tokens", "output_tokens")


def rerank_usage_per_day(project_id: uuid.UUID, *, since: datetime) -> list[dict[str, Any]]:
    """What the project's reranked searches used per day (UTC) from `since`, newest first:
    day, searches, reranked, calls, input_tokens, output_tokens (RerankUsageDay)."""
    rows = RerankUsageDay.objects.filter(project_id=project_id, day__gte=since.date())
    return list(rows.order_by("-day").values("day", *RERANK_USAGE_KEYS))


# The scope ids usage is summed by (usage_per_scope), by kind.
USAGE_SCOPES = {"user": "user_id", "agent": "agent_id"}


def _usage_sums() -> dict[str, Any]:
    return {
        "events": Count("id"),
        "calls": _usage_total("calls"),
        "input_tokens": _usage_total("input_tokens"),
        "output_tokens": _usage_total("output_tokens"),
    }


def usage_per_scope(
    project_id: uuid.UUID, kind: str, *, since: datetime, limit: int
) -> list[dict[str, Any]]:
    """The `limit` users (kind "user") or agents ("agent") whose add requests created from
    `since` used the most tokens (input + output), then by id: scope_id, events, calls,
    input_tokens, output_tokens, tokens. Only the requests still kept, with that id set: an
    erased user's requests are gone with them, by design (their usage survives only in the
    per-day totals, UsageDay, without any user id). One GROUP BY statement."""
    field = USAGE_SCOPES[kind]
    rows = (
        MemoryEvent.objects.filter(
            project_id=project_id, created_at__gte=since, **{f"{field}__isnull": False}
        )
        .values(field)
        .annotate(**_usage_sums())
        .annotate(tokens=F("input_tokens") + F("output_tokens"))
        # The most tokens first; among equal tokens (all 0 with the offline extractor), the
        # most requests.
        .order_by("-tokens", "-events", field)[:limit]
    )
    return [{"scope_id": row.pop(field), **row} for row in rows]


def user_usage_per_day(
    project_id: uuid.UUID, user_id: str, *, since: datetime, limit: int
) -> list[dict[str, Any]]:
    """One user's add requests created from `since` and their model usage, per day (current
    time zone, UTC), newest first, at most `limit` days: day, events, calls, input_tokens,
    output_tokens. The requests kept only (an erased user has none). One GROUP BY statement,
    on the index of a user's requests (event_user_scope)."""
    rows = (
        MemoryEvent.objects.filter(project_id=project_id, user_id=user_id, created_at__gte=since)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(**_usage_sums())
        .order_by("-day")[:limit]
    )
    return list(rows)


def event(project_id: uuid.UUID, event_id: uuid.UUID) -> MemoryEvent | None:
    return MemoryEvent.objects.filter(project_id=project_id, pk=event_id).first()


def events_by_id(project_id: uuid.UUID, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, MemoryEvent]:
    """The project's events among `ids`, by id, without their payloads (one query)."""
    wanted = list(ids)
    if not wanted:
        return {}
    rows = MemoryEvent.objects.filter(project_id=project_id, pk__in=wanted).defer("payload")
    return {event.pk: event for event in rows}


def export(
    project_id: uuid.UUID,
    *,
    export_id: uuid.UUID | None = None,
    filters: dict[str, Any] | None = None,
) -> MemoryExport | None:
    """An export by id, or the latest one made with exactly these filters, or the latest."""
    found = MemoryExport.objects.filter(project_id=project_id)
    if export_id is not None:
        found = found.filter(pk=export_id)
    elif filters is not None:
        found = found.filter(filters=filters)
    return found.order_by("-created_at").first()


def erasures(project_id: uuid.UUID) -> QuerySet[ErasureRequest]:
    """The project's erasure requests, newest first (by erasure_project_time)."""
    return ErasureRequest.objects.filter(project_id=project_id).order_by("-created_at", "-id")


def erasure(project_id: uuid.UUID, request_id: uuid.UUID) -> ErasureRequest | None:
    """An erasure asked through the API (audit.models.ErasureRequest), in the project."""
    return ErasureRequest.objects.filter(project_id=project_id, pk=request_id).first()
