"""Installing engram with a hosted embedding model of another dimension (issue #30): the first
`migrate` records the settings' model and builds the vector index for its dimension; a process
whose settings name another model refuses to start (`manage.py check --database default`).

A database of its own, migrated from nothing by `manage.py migrate` as an operator runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
NAME = "test_engram_install_768"
HOSTED = {
    "ENGRAM_EMBEDDER": "openai-compatible",
    "ENGRAM_EMBEDDING_URL": "http://127.0.0.1:9/v1",  # migrate embeds nothing
    "ENGRAM_EMBEDDING_MODEL": "nomic-embed-text",
    "ENGRAM_EMBEDDING_DIMENSIONS": "768",
}


def owner_dsn(name: str) -> str:
    db = connection.settings_dict
    role = settings.ENGRAM_DB_OWNER or db
    return psycopg.conninfo.make_conninfo(
        dbname=name, user=role["USER"], password=role["PASSWORD"], host=db["HOST"],
        port=str(db["PORT"]),
    )  # fmt: skip


@pytest.fixture
def database() -> Iterator[str]:
    with psycopg.connect(owner_dsn(connection.settings_dict["NAME"]), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {NAME}")
        admin.execute(f"CREATE DATABASE {NAME}")
    try:
        yield NAME
    finally:
        with psycopg.connect(owner_dsn(connection.settings_dict["NAME"]), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")


def manage(name: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    db = connection.settings_dict
    role = settings.ENGRAM_DB_OWNER or db
    url = f"postgresql://{role['USER']}:{role['PASSWORD']}@{db['HOST']}:{db['PORT']}/{name}"
    env = {**os.environ, "DATABASE_URL": url, "ENGRAM_LOG_LEVEL": "WARNING", **extra}
    for variable in (*HOSTED, "ENGRAM_EMBEDDING_SEND_DIMENSIONS", "ENGRAM_LOCAL_MODEL"):
        if variable not in extra:
            env.pop(variable, None)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
        text=True, check=False, timeout=300,
    )  # fmt: skip


def installed(database: str) -> tuple[list[tuple[Any, ...]], str]:
    """The embedding spaces the install recorded, and the HNSW index's definition."""
    with psycopg.connect(owner_dsn(database)) as db:
        space = db.execute(
            "SELECT name, embedder, url, model, dimensions, state FROM memory_embeddingspace"
        ).fetchall()
        index = db.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_embedding_hnsw'"
        ).fetchone()
    assert index is not None
    return space, str(index[0])


@pytest.mark.django_db
def test_a_deployment_installed_with_a_768_dimension_model(database: str) -> None:
    migrated = manage(database, "migrate", "--no-input", "-v", "0", **HOSTED)
    assert migrated.returncode == 0, migrated.stderr
    space, index = installed(database)
    assert space == [(
        "openai-compatible:nomic-embed-text", "openai-compatible", "http://127.0.0.1:9/v1",
        "nomic-embed-text", 768, "current",
    )]  # fmt: skip
    assert "(embedding)::vector(768)" in index
    # The same settings start; the local model's (384) do not, saying what to do.
    assert manage(database, "check", "--database", "default", **HOSTED).returncode == 0
    refused = manage(database, "check", "--database", "default")
    assert refused.returncode != 0
    assert "memory.E001" in refused.stderr and "manage.py reembed" in refused.stderr
    # The same model served elsewhere is the same model.
    moved = {**HOSTED, "ENGRAM_EMBEDDING_URL": "http://embeddings.internal:8080/v1"}
    assert manage(database, "check", "--database", "default", **moved).returncode == 0
    # And so is a second migrate, which checks too.
    again = manage(database, "migrate", "--no-input", "-v", "0")
    assert again.returncode != 0 and "memory.E001" in again.stderr


@pytest.mark.django_db
def test_a_deployment_installed_with_the_larger_local_model(database: str) -> None:
    """ENGRAM_LOCAL_MODEL=all-mpnet-base-v2: the first migrate records that model by name, with
    its 768 dimensions, and a process with the default model's settings refuses to start."""
    mpnet = {"ENGRAM_LOCAL_MODEL": "all-mpnet-base-v2"}
    migrated = manage(database, "migrate", "--no-input", "-v", "0", **mpnet)
    assert migrated.returncode == 0, migrated.stderr
    space, index = installed(database)
    assert space == [("local:all-mpnet-base-v2", "local", "", "all-mpnet-base-v2", 768, "current")]
    assert "(embedding)::vector(768)" in index
    assert manage(database, "check", "--database", "default", **mpnet).returncode == 0
    refused = manage(database, "check", "--database", "default")
    assert refused.returncode != 0 and "memory.E001" in refused.stderr
    assert "local:all-mpnet-base-v2 (768 dimensions)" in refused.stderr
