"""The PostgreSQL server log keeps no user text: statements, parameters and DETAIL lines stay out.

scripts/pg.sh configures the local cluster (its log is postgres.log beside the data directory)
and docker/postgres.Dockerfile the production image, with the same settings.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import TestCase

ROOT = Path(__file__).resolve().parents[2]
LOG_SETTINGS = {
    "log_statement": "none",
    "log_min_duration_statement": "-1",
    "log_min_error_statement": "panic",
    "log_parameter_max_length": "0",
    "log_parameter_max_length_on_error": "0",
    "log_error_verbosity": "terse",
}


def local_cluster_log() -> Path | None:
    """postgres.log of the scripts/pg.sh cluster, if that is the cluster the tests run on."""
    try:
        home = Path((ROOT / ".local" / "pgdir").read_text().strip())
        conf = (home / "data" / "engram.conf").read_text()
        log = home / "postgres.log"
        log.stat()
    except OSError:
        return None
    port = re.search(r"^port = (\d+)$", conf, re.MULTILINE)
    if port is None or port.group(1) != str(connection.settings_dict["PORT"]):
        return None
    return log


def fail(sql: str, params: list[str]) -> None:
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


class PostgresLogTestCase(TestCase):
    def test_it_runs_with_the_log_settings(self) -> None:
        with connection.cursor() as cursor:
            for name, expected in LOG_SETTINGS.items():
                cursor.execute(f"SHOW {name}")
                assert cursor.fetchone() == (expected,), name

    def test_it_keeps_statements_parameters_and_details_out_of_the_log(self) -> None:
        log = local_cluster_log()
        if log is None:
            pytest.skip("not running on the scripts/pg.sh cluster")
        marker = f"log-marker-{uuid.uuid4().hex}"
        start = log.stat().st_size
        fail(f"SELECT 1 / 0 WHERE %s IS NOT NULL /* {marker} */", [marker])
        # A unique violation's DETAIL line quotes the duplicate value.
        fail(
            "INSERT INTO tenants_organization (id, name, created_at) "
            "VALUES (gen_random_uuid(), %s, now()), (gen_random_uuid(), %s, now())",
            [marker, marker],
        )
        written = ""
        for _ in range(50):  # the server writes its log lines as the errors happen
            written = log.read_bytes()[start:].decode(errors="replace")
            if "duplicate key value" in written:
                break
            time.sleep(0.1)
        assert "division by zero" in written
        assert "duplicate key value" in written
        assert marker not in written


def test_it_configures_the_docker_image_like_the_local_cluster() -> None:
    pg_sh = (ROOT / "scripts" / "pg.sh").read_text()
    dockerfile = (ROOT / "docker" / "postgres.Dockerfile").read_text()
    for name, value in LOG_SETTINGS.items():
        assert re.search(rf"^{name} = '?{re.escape(value)}'?$", pg_sh, re.MULTILINE), name
        assert f'"{name}={value}"' in dockerfile, name
