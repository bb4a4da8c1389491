"""The Usage page: what a project used in the last 30 days, for its operators — every API call
(per day and per endpoint, with errors and the server's time), the models' calls and tokens
(extraction per day and per model, the reranker), their cost where the operator has set a
price (ENGRAM_MODEL_PRICES, config/prices.py), and who spent it (users and agents; one user's
days when filtered by a user).

Reads go through memory.queries; nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.utils import timezone

from config.prices import Price
from memory import queries
from memory.models import SCOPE_MAX_LENGTH
from memory.web.common import Dashboard, operator_page
from memory.web.operations import USAGE_DAYS, usage_since

USAGE_KEYS = ("events", "calls", "input_tokens", "output_tokens")
RERANK_USAGE_KEYS = ("searches", "reranked", "calls", "input_tokens", "output_tokens")
CALL_KEYS = ("calls", "client_errors", "server_errors")
USAGE_SCOPES_SHOWN = 25  # users and agents in the usage tables, the most tokens first
TOKEN_KEYS = (
    "calls",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


class UsageFilterForm(forms.Form):
    user_id = forms.CharField(max_length=SCOPE_MAX_LENGTH, required=False, label="User id")


@dataclass
class ModelCost:
    """One model's calls and tokens over the period, and their cost (None: no price set)."""

    source: str  # "extraction" or "reranker"
    model: str  # "" when no model was recorded
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    price: Price | None = None

    @property
    def cost(self) -> float | None:
        if self.price is None:
            return 0.0 if not self.calls else None
        return self.price.cost({key: getattr(self, key) for key in TOKEN_KEYS})


def _price(model: str) -> Price | None:
    prices: dict[str, Price] = settings.ENGRAM_MODEL_PRICES
    return prices.get(model)


def _reranker_model() -> str:
    """The model the reranker's calls are priced by: the extraction model's for "judge", the
    endpoint's ENGRAM_RERANK_MODEL for "endpoint" (its counts carry no model name)."""
    if settings.ENGRAM_RERANK == "judge":
        return str(settings.ENGRAM_LLM_MODEL)
    return str(settings.ENGRAM_RERANK_MODEL)


def model_costs(models: list[dict[str, Any]], rerank_days: list[dict[str, Any]]) -> list[ModelCost]:
    """Per source and model, the period's calls and tokens and their cost, the most calls
    first (then by model): extraction per recorded model, then the reranker."""
    found: dict[tuple[str, str], ModelCost] = {}
    for row in models:
        if not row["calls"]:
            continue  # the offline extractor's requests: no model call, nothing to price
        cost = found.setdefault(
            ("extraction", row["model"]),
            ModelCost("extraction", row["model"], price=_price(row["model"])),
        )
        for key in TOKEN_KEYS:
            setattr(cost, key, getattr(cost, key) + int(row[key]))
    reranker = _reranker_model()
    for row in rerank_days:
        if not row["calls"]:
            continue
        cost = found.setdefault(
            ("reranker", reranker), ModelCost("reranker", reranker, price=_price(reranker))
        )
        for key in ("calls", "input_tokens", "output_tokens"):
            setattr(cost, key, getattr(cost, key) + int(row[key]))
    return sorted(found.values(), key=lambda c: (c.source != "extraction", -c.calls, c.model))


def days_with_cost(
    days: list[dict[str, Any]], models: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The days of usage_per_day, each with the cost of its priced model calls (`cost`) and
    whether some of its calls have no price (`unpriced`)."""
    per_day: dict[Any, dict[str, Any]] = {}
    for row in models:
        day = per_day.setdefault(row["day"], {"cost": 0.0, "unpriced": False})
        price = _price(row["model"])
        if price is not None:
            day["cost"] += price.cost(row)
        elif row["calls"]:
            day["unpriced"] = True
    return [day | per_day.get(day["day"], {"cost": 0.0, "unpriced": False}) for day in days]


@operator_page()
def usage(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """The last 30 days: API calls per day and per endpoint; model calls, tokens and cost per
    day and per model; the reranker's; usage by user and by agent; filtered by a user, that
    user's usage per day."""
    form = UsageFilterForm(request.GET)
    user_id = (form.cleaned_data.get("user_id") if form.is_valid() else "") or None
    since = usage_since()
    project = dash.project.pk
    models = queries.model_usage_per_day(project, since=since)
    days = days_with_cost(queries.usage_per_day(project, since=since), models)
    rerank_days = queries.rerank_usage_per_day(project, since=since)
    costs = model_costs(models, rerank_days)
    calls = queries.calls_per_day(project, since=since)
    user_days: list[dict[str, Any]] = []
    if user_id:
        user_days = queries.user_usage_per_day(project, user_id, since=since, limit=USAGE_DAYS)
    priced = [c.cost for c in costs if c.cost is not None]
    context = {
        "section": "usage",
        "form": form,
        "usage_days": USAGE_DAYS,
        "tz": timezone.get_current_timezone_name(),
        "calls": calls,
        "call_totals": {key: sum(day[key] for day in calls) for key in CALL_KEYS},
        "endpoints": queries.calls_per_endpoint(project, since=since),
        "days": days,
        "days_unpriced": any(day["unpriced"] for day in days),
        "days_cost": sum(day["cost"] for day in days),  # extraction's: the reranker is apart
        "totals": {key: sum(day[key] for day in days) for key in USAGE_KEYS},
        "costs": costs,
        "total_cost": sum(priced) if priced else None,
        "unpriced": [c for c in costs if c.cost is None],
        "rerank_days": rerank_days,
        "rerank_totals": {key: sum(day[key] for day in rerank_days) for key in RERANK_USAGE_KEYS},
        "reranker": settings.ENGRAM_RERANK,
        "users": queries.usage_per_scope(project, "user", since=since, limit=USAGE_SCOPES_SHOWN),
        "agents": queries.usage_per_scope(project, "agent", since=since, limit=USAGE_SCOPES_SHOWN),
        "usage_shown": USAGE_SCOPES_SHOWN,
        "user_id": user_id,
        "user_days": user_days,
        "user_totals": {key: sum(day[key] for day in user_days) for key in USAGE_KEYS},
        "extractor": settings.ENGRAM_EXTRACTOR,
        "model": settings.ENGRAM_LLM_MODEL if settings.ENGRAM_EXTRACTOR != "offline" else "",
    }
    return render(request, "web/operator/usage.html", context)


urlpatterns = [path("usage/", usage, name="usage")]
