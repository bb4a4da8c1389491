"""Shared helpers for the benchmarks: percentiles, the API client, the target server."""

from __future__ import annotations

import os
import random
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
    """An engram API client. A 429 (the per-key rate limit, ENGRAM_API_RATE: other benchmarks
    may share the key) is waited out for its Retry-After and sent again, and counted in
    `throttled`; the latency is the answered request's. Any other error status raises."""

    def __init__(self, host: str, key: str) -> None:
        self.http = httpx.Client(
            base_url=host, headers={"Authorization": f"Token {key}"}, timeout=120
        )
        self.throttled = 0

    def call(self, method: str, path: str, **kwargs: Any) -> tuple[Any, float]:
        while True:
            started = time.perf_counter()
            response = self.http.request(method, path, **kwargs)
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 429:
                break
            self.throttled += 1
            time.sleep(float(response.headers.get("Retry-After") or 1))
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path} -> {response.status_code}: {response.text[:300]}")
        return response.json(), elapsed


# The synthetic memory text generator shared by bench/search.py and bench/scale.py.
WORDS = {
    "verb": [
        "likes",
        "loves",
        "visited",
        "booked",
        "cooked",
        "painted",
        "adopted",
        "studied",
        "bought",
        "planned",
    ],
    "adj": [
        "red",
        "quiet",
        "spicy",
        "ancient",
        "modern",
        "tiny",
        "vegan",
        "italian",
        "rainy",
        "wooden",
    ],
    "noun": [
        "coffee",
        "garden",
        "novel",
        "bicycle",
        "concert",
        "museum",
        "recipe",
        "puppy",
        "marathon",
        "guitar",
    ],
    "place": [
        "Lisbon",
        "Berlin",
        "Kyoto",
        "Austin",
        "Oslo",
        "Lima",
        "Cairo",
        "Perth",
        "Quebec",
        "Seoul",
    ],
}


def sentence(rng: random.Random) -> str:
    w = {k: rng.choice(v) for k, v in WORDS.items()}
    return f"User {w['verb']} the {w['adj']} {w['noun']} in {w['place']} #{rng.randrange(10**6)}"


def user_sizes(memories: int, users: int, exponent: float = 0.8) -> list[int]:
    """Zipf-like sizes: user i gets a share proportional to 1 / (i + 1) ** exponent."""
    weights = [1 / (i + 1) ** exponent for i in range(users)]
    total = sum(weights)
    sizes = [max(1, int(memories * w / total)) for w in weights]
    sizes[0] += memories - sum(sizes)
    return sizes


def wait_for_entity_linking(timeout: float = 1800) -> bool:
    """Until the worker's `entities` queue has nothing queued or being consumed (read through
    DATABASE_URL); False when it still had work after `timeout` seconds or there is no
    DATABASE_URL to read it through. Prints how long it waited."""
    import psycopg

    load_local_env()
    url = os.environ.get("DATABASE_URL")
    if not url:
        print("no DATABASE_URL: not waiting for entity linking")
        return False
    started = time.perf_counter()
    done = False
    with psycopg.connect(url, autocommit=True) as conn:
        while time.perf_counter() - started < timeout:
            row = conn.execute(
                "SELECT count(*) FROM dramatiq.queue WHERE queue_name = 'entities' "
                "AND state IN ('queued', 'consumed')"
            ).fetchone()
            if row is not None and row[0] == 0:
                done = True
                break
            time.sleep(1)
    waited = time.perf_counter() - started
    print(
        f"entity linking done after {waited:.0f}s of waiting"
        if done
        else f"entity linking NOT done after {waited:.0f}s of waiting: searching anyway"
    )
    return done
