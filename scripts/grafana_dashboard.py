"""Write engram's Grafana dashboard: `python scripts/grafana_dashboard.py [OUT]`.

OUT defaults to docs/monitoring/engram-grafana.json, the file the docs offer for import
(Dashboards > New > Import; choose the Prometheus data source when asked). The panels are
defined here, once; tests/config/test_monitoring.py checks that the committed file is this
script's output, that promtool parses every query, and that every series a query names is one
engram exports. Queries over the figures read at scrape time (queues, workers, sessions) take
`max`: the web server and every worker report the same ones.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "docs" / "monitoring" / "engram-grafana.json"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
RATE = "[$__rate_interval]"


def quantiles(metric: str, where: str = "", by: str = "") -> list[tuple[str, str]]:
    """p50, p95 and p99 of a histogram `metric` (its _bucket series), per `by` labels."""
    group = f"le{', ' + by if by else ''}"
    legend = f"{{{{{by}}}}} " if by else ""
    return [
        (
            f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{where}}}{RATE})))",
            f"{legend}p{int(q * 100)}",
        )
        for q in (0.5, 0.95, 0.99)
    ]


# (row, [(title, unit, [(query, legend)])]): each row's panels, two per line.
ROWS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]]]]]] = [
    (
        "API",
        [
            (
                "Requests per second by status",
                "reqps",
                [
                    (
                        f"sum by (status) (rate(engram_http_request_duration_seconds_count{RATE}))",
                        "{{status}}",
                    )
                ],
            ),
            (
                "Share of requests answered 5xx",
                "percentunit",
                [
                    (
                        "sum(rate(engram_http_request_duration_seconds_count"
                        f'{{status=~"5.."}}{RATE})) / '
                        f"sum(rate(engram_http_request_duration_seconds_count{RATE}))",
                        "5xx",
                    )
                ],
            ),
            (
                "Search latency over HTTP",
                "s",
                quantiles(
                    "engram_http_request_duration_seconds", 'route=~"v[12]/memories/search/"'
                ),
            ),
            (
                "Add latency over HTTP",
                "s",
                quantiles(
                    "engram_http_request_duration_seconds",
                    'route=~"v[12]/memories/", method="POST"',
                ),
            ),
            (
                "Slowest routes (p95)",
                "s",
                [
                    (
                        "topk(5, histogram_quantile(0.95, sum by (le, route) "
                        f"(rate(engram_http_request_duration_seconds_bucket{RATE}))))",
                        "{{route}}",
                    )
                ],
            ),
            (
                "Searches by strategy and outcome",
                "ops",
                [
                    (
                        f"sum by (strategy, outcome) (rate(engram_searches_total{RATE}))",
                        "{{strategy}} {{outcome}}",
                    )
                ],
            ),
            (
                "Search statement (p95) by strategy",
                "s",
                [
                    (
                        "histogram_quantile(0.95, sum by (le, strategy) "
                        f"(rate(engram_search_statement_seconds_bucket{RATE})))",
                        "{{strategy}}",
                    )
                ],
            ),
            (
                "Embedding (p95) by kind",
                "s",
                [
                    (
                        "histogram_quantile(0.95, sum by (le, kind, embedder) "
                        f"(rate(engram_embedding_seconds_bucket{RATE})))",
                        "{{kind}} ({{embedder}})",
                    )
                ],
            ),
        ],
    ),
    (
        "Queue and workers",
        [
            (
                "Messages due, by queue",
                "short",
                [('max by (queue) (engram_queue_messages{state="due"})', "{{queue}}")],
            ),
            (
                "Oldest due message, by queue",
                "s",
                [("max by (queue) (engram_queue_oldest_due_seconds)", "{{queue}}")],
            ),
            (
                "Workers alive and newest heartbeat",
                "short",
                [
                    ("max(engram_workers_alive)", "workers alive"),
                    ("min(engram_worker_heartbeat_age_seconds)", "heartbeat age (s)"),
                ],
            ),
            (
                "Add requests' extraction attempts by outcome",
                "ops",
                [(f"sum by (outcome) (rate(engram_events_total{RATE}))", "{{outcome}}")],
            ),
            (
                "Worker messages (p95) by actor",
                "s",
                [
                    (
                        "histogram_quantile(0.95, sum by (le, actor) "
                        f"(rate(engram_job_duration_seconds_bucket{RATE})))",
                        "{{actor}}",
                    )
                ],
            ),
            (
                "Webhook deliveries by outcome",
                "ops",
                [
                    (
                        f"sum by (outcome) (rate(engram_webhook_deliveries_total{RATE}))",
                        "{{outcome}}",
                    )
                ],
            ),
        ],
    ),
    (
        "Models and cost",
        [
            (
                "Model calls by provider and outcome",
                "ops",
                [
                    (
                        "sum by (provider, outcome) "
                        f"(rate(engram_model_call_duration_seconds_count{RATE}))",
                        "{{provider}} {{outcome}}",
                    )
                ],
            ),
            (
                "Model call latency (p95) by step",
                "s",
                [
                    (
                        "histogram_quantile(0.95, sum by (le, step) "
                        f"(rate(engram_model_call_duration_seconds_bucket{RATE})))",
                        "{{step}}",
                    )
                ],
            ),
            (
                "Tokens per second by model and kind",
                "short",
                [
                    (
                        f"sum by (model, kind) (rate(engram_model_tokens_total{RATE}))",
                        "{{model}} {{kind}}",
                    )
                ],
            ),
            (
                "Model cost per hour (ENGRAM_MODEL_PRICES)",
                "currencyUSD",
                [
                    (
                        f"sum by (model) (rate(engram_model_tokens_total{RATE}) * on (model, kind)"
                        " group_left max by (model, kind) "
                        "(engram_model_price_dollars_per_token)) * 3600",
                        "{{model}}",
                    )
                ],
            ),
            (
                "Reranker calls by outcome",
                "ops",
                [
                    (
                        f"sum by (reranker, outcome) (rate(engram_reranks_total{RATE}))",
                        "{{reranker}} {{outcome}}",
                    )
                ],
            ),
        ],
    ),
    (
        "Database",
        [
            (
                "Deadlines fired",
                "ops",
                [
                    (
                        f"sum by (deadline, process) (rate(engram_deadlines_total{RATE}))",
                        "{{process}} {{deadline}}",
                    )
                ],
            ),
            (
                "Application sessions by state",
                "short",
                [("max by (state) (engram_db_sessions)", "{{state}}")],
            ),
            (
                "Sessions opened per second",
                "ops",
                [
                    (
                        f"sum by (process) (rate(engram_db_connections_opened_total{RATE}))",
                        "{{process}}",
                    )
                ],
            ),
            (
                "Database answers the scrape",
                "short",
                [("min(engram_database_up)", "up")],
            ),
        ],
    ),
]


def panel(
    ident: int, title: str, unit: str, queries: list[tuple[str, str]], *, x: int, y: int
) -> Any:
    return {
        "id": ident,
        "type": "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": 12, "h": 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": q, "legendFormat": lg}
            for i, (q, lg) in enumerate(queries)
        ],
    }


def dashboard() -> dict[str, Any]:
    panels: list[Any] = []
    y = 0
    ident = 1
    for row, items in ROWS:
        grid = {"x": 0, "y": y, "w": 24, "h": 1}
        panels.append(
            {
                "id": ident,
                "type": "row",
                "title": row,
                "collapsed": False,
                "panels": [],
                "gridPos": grid,
            }
        )
        ident, y = ident + 1, y + 1
        for i, (title, unit, queries) in enumerate(items):
            panels.append(panel(ident, title, unit, queries, x=12 * (i % 2), y=y + 8 * (i // 2)))
            ident += 1
        y += 8 * ((len(items) + 1) // 2)
    return {
        "__inputs": [
            {
                "name": "DS_PROMETHEUS",
                "label": "Prometheus",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "title": "engram",
        "uid": "engram-overview",
        "description": "engram's metrics (docs/monitoring.md): API, queue, models, database.",
        "tags": ["engram"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": []},
        "annotations": {"list": []},
        "panels": panels,
    }


def queries() -> list[str]:
    """Every query of the dashboard (the tests check them)."""
    return [q for _, items in ROWS for _, _, qs in items for q, _ in qs]


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    out.write_text(render())
    print(f"wrote {out}")
