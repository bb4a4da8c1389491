"""Shared helpers for the benchmarks: percentiles, the API client, the target server."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


def load_local_env() -> None:
    """The local cluster's settings (.local/engram.env, written by scripts/pg.sh), for the
    benchmarks that use Django directly; variables already set win."""
    path = ROOT / ".local" / "engram.env"
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() and not name.lstrip().startswith("#"):
            os.environ.setdefault(name.strip(), value.strip().strip("'\""))


def default_host() -> str:
    return os.environ.get("ENGRAM_URL", f"http://127.0.0.1:{os.environ.get('ENGRAM_PORT', '8000')}")


def default_key() -> str | None:
    key = os.environ.get("ENGRAM_API_KEY")
    demo = ROOT / ".local" / "demo_api_key"
    if not key and demo.exists():
        key = demo.read_text().strip()
    return key


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "mean": 0.0}
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {
        "p50": pick(0.50),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "mean": statistics.fmean(ordered),
    }


def fmt_ms(stats: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.2f}ms" for k, v in stats.items())


class Api:
    def __init__(self, host: str, key: str) -> None:
        self.http = httpx.Client(
            base_url=host, headers={"Authorization": f"Token {key}"}, timeout=120
        )

    def call(self, method: str, path: str, **kwargs: Any) -> tuple[Any, float]:
        started = time.perf_counter()
        response = self.http.request(method, path, **kwargs)
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path} -> {response.status_code}: {response.text[:300]}")
        return response.json(), elapsed
