"""The operator's monitoring kit (issue #51, part 7; docs/monitoring.md): the Grafana dashboard
is scripts/grafana_dashboard.py's output and the alert rules hold, both checked by promtool
(Debian's prometheus package: `make promtool`), and every series they name is one engram
exports (read off a real scrape)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.db import connection
from django.test import Client

from config.prices import parse_prices
from tests.config.test_metrics import TOKEN, parse

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "monitoring"
ALERTS = DOCS / "engram-alerts.yml"
DASHBOARD = DOCS / "engram-grafana.json"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

# The script, loaded from its file (scripts/ is not a package).
_spec = importlib.util.spec_from_file_location(
    "grafana_dashboard", ROOT / "scripts" / "grafana_dashboard.py"
)
assert _spec is not None and _spec.loader is not None
grafana_dashboard: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(grafana_dashboard)


def promtool(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_committed_dashboard_is_the_scripts_output() -> None:
    assert DASHBOARD.read_text() == grafana_dashboard.render(), (
        "run: .venv/bin/python scripts/grafana_dashboard.py"
    )
    board = json.loads(DASHBOARD.read_text())
    panels = [p for p in board["panels"] if p["type"] == "timeseries"]
    assert len(panels) == sum(len(items) for _, items in grafana_dashboard.ROWS)
    assert all(p["title"] and p["targets"] and p["gridPos"]["w"] == 12 for p in panels)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_the_alert_rules_parse_and_their_unit_tests_pass() -> None:
    assert "SUCCESS: 11 rules found" in promtool("check", "rules", str(ALERTS))
    out = promtool("test", "rules", "alerts-test.yml", cwd=ROOT / "tests" / "config" / "monitoring")
    assert "SUCCESS" in out


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"engram:dashboard:{i}", "expr": q.replace("$__rate_interval", "5m")}
                    for i, q in enumerate(grafana_dashboard.queries())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules))
    assert f"SUCCESS: {len(grafana_dashboard.queries())} rules found" in promtool(
        "check", "rules", str(path)
    )


def exported() -> set[str]:
    """Every series name a scrape of this process can carry (a family's and its suffixes')."""
    samples = parse(
        Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).content.decode()
    )
    names = {name for name, _ in samples}
    from prometheus_client import REGISTRY

    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(f"{family.name}{s}" for s in ("_total", "_bucket", "_count", "_sum"))
    return names


@pytest.mark.django_db
def test_every_series_they_name_is_exported(settings: Any) -> None:
    settings.ENGRAM_METRICS_TOKEN = TOKEN
    settings.ENGRAM_MODEL_PRICES = parse_prices('{"m-1": {"input": 1, "output": 5}}')
    with connection.cursor() as cursor:  # a worker's heartbeat: its age is reported
        cursor.execute(
            "INSERT INTO dramatiq.worker (worker_id, heartbeat_at) "
            "VALUES (gen_random_uuid(), now())"
        )
    alerts = yaml.safe_load(ALERTS.read_text())
    exprs = [rule["expr"] for group in alerts["groups"] for rule in group["rules"]]
    named = {
        name
        for expr in [*exprs, *grafana_dashboard.queries()]
        for name in re.findall(r"\bengram_[a-z_]+\b", expr)
    }
    assert len(named) >= 15
    assert named - exported() == set()
