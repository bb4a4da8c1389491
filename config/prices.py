"""Model prices, as the operator sets them (ENGRAM_MODEL_PRICES): what the Usage page multiplies
tokens by. engram ships no price list: prices differ by contract, region and date, and a stale
built-in figure would be a wrong bill; a model without a price shows its tokens and "no price".

ENGRAM_MODEL_PRICES is a JSON object, model name (as ENGRAM_LLM_MODEL or ENGRAM_RERANK_MODEL
names it) to its prices in US dollars per million tokens:

    {"claude-haiku-5-5": {"input": 1, "output": 5, "cache_write": 1.25, "cache_read": 0.1}}

`input` and `output` are required; a cache price left out costs as `input`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

MILLION = 1_000_000
_FIELDS = ("input", "output", "cache_write", "cache_read")


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens of each kind."""

    input: float
    output: float
    cache_write: float
    cache_read: float

    def cost(self, row: dict[str, Any]) -> float:
        """The cost of a usage row's tokens (input_tokens, output_tokens,
        cache_creation_input_tokens, cache_read_input_tokens; missing ones count 0)."""
        tokens = (
            self.input * int(row.get("input_tokens") or 0)
            + self.output * int(row.get("output_tokens") or 0)
            + self.cache_write * int(row.get("cache_creation_input_tokens") or 0)
            + self.cache_read * int(row.get("cache_read_input_tokens") or 0)
        )
        return tokens / MILLION


def parse_prices(raw: str, name: str = "ENGRAM_MODEL_PRICES") -> dict[str, Price]:
    """The prices of `raw` (see the module docstring); ImproperlyConfigured on anything else."""
    try:
        given = json.loads(raw or "{}")
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not JSON: {exc}.") from None
    if not isinstance(given, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object: model name to its prices.")
    prices: dict[str, Price] = {}
    for model, figures in given.items():
        if not model.strip() or not isinstance(figures, dict):
            raise ImproperlyConfigured(
                f'{name}: each model needs an object of prices, e.g. {{"input": 1, "output": 5}}.'
            )
        unknown = set(figures) - set(_FIELDS)
        if unknown or not {"input", "output"} <= set(figures):
            raise ImproperlyConfigured(
                f"{name}: {model!r} needs `input` and `output` (and may give `cache_write`, "
                f"`cache_read`), in US dollars per million tokens; it gives {sorted(figures)}."
            )
        values: dict[str, Any] = {k: figures.get(k, figures["input"]) for k in _FIELDS}
        for kind, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ImproperlyConfigured(f"{name}: {model!r} {kind} must be a number.")
            if not math.isfinite(value) or value < 0:
                raise ImproperlyConfigured(f"{name}: {model!r} {kind} must be 0 or more.")
        prices[model] = Price(**{k: float(v) for k, v in values.items()})
    return prices
