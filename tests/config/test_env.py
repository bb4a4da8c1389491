from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_choice, env_int, env_list, env_secret


def test_it_parses_booleans_and_refuses_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_FLAG", "Yes")
    assert env_bool("X_FLAG", False) is True
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG"):
        env_bool("X_FLAG", False)


def test_it_enforces_integer_minimums(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_INT", "12")
    assert env_int("X_INT", 1, minimum=10) == 12
    monkeypatch.setenv("X_INT", "3")
    with pytest.raises(ImproperlyConfigured, match="minimum"):
        env_int("X_INT", 1, minimum=10)
    monkeypatch.setenv("X_INT", "twelve")
    with pytest.raises(ImproperlyConfigured, match="not an integer"):
        env_int("X_INT", 1)


def test_it_splits_lists_and_checks_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_LIST", " a.example, b.example ,,")
    assert env_list("X_LIST", []) == ["a.example", "b.example"]
    monkeypatch.setenv("X_CHOICE", "loud")
    with pytest.raises(ImproperlyConfigured, match="must be one of"):
        env_choice("X_CHOICE", "json", ("json", "text"))


def test_it_reads_secrets_from_files(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret\n")
    monkeypatch.delenv("X_SECRET", raising=False)
    monkeypatch.setenv("X_SECRET_FILE", str(secret_file))
    assert env_secret("X_SECRET") == "s3cret"
    monkeypatch.setenv("X_SECRET", "other")
    with pytest.raises(ImproperlyConfigured, match="not both"):
        env_secret("X_SECRET")


def start_django(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={"DJANGO_SETTINGS_MODULE": "config.settings", "PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=False,
    )


KEY = secrets.token_urlsafe(50)


def test_it_requires_a_secret_key_even_locally() -> None:
    for env in ("production", "local"):
        result = start_django(DATABASE_URL="postgresql://u:p@127.0.0.1:1/x", ENGRAM_ENV=env)
        assert result.returncode != 0
        assert "Set ENGRAM_SECRET_KEY" in result.stderr


def test_it_refuses_a_weak_secret_key() -> None:
    for weak in ("change-me", "k" * 60):
        result = start_django(DATABASE_URL="postgresql://u:p@127.0.0.1:1/x", ENGRAM_SECRET_KEY=weak)
        assert result.returncode != 0
        assert "ENGRAM_SECRET_KEY is too short" in result.stderr


def test_it_runs_the_suite_with_the_generated_local_key() -> None:
    # scripts/pg.sh generates it into .local/ (mode 600) once and keeps it across runs.
    assert len(settings.SECRET_KEY) >= 50
    key_file = os.environ.get("ENGRAM_SECRET_KEY_FILE")
    if key_file:
        assert Path(key_file).stat().st_mode & 0o077 == 0


def test_it_refuses_the_old_name_of_the_text_limit() -> None:
    result = start_django(
        DATABASE_URL="postgresql://u:p@127.0.0.1:1/x", ENGRAM_SECRET_KEY=KEY,
        ENGRAM_MAX_MESSAGE_CHARS="5000",
    )  # fmt: skip
    assert result.returncode != 0
    assert "set ENGRAM_MAX_TEXT_CHARS instead" in result.stderr


def test_it_refuses_the_removed_entity_search_settings() -> None:
    for name, constant in (
        ("ENGRAM_SEARCH_ENTITY_WEIGHT", "fitted from labelled data, in memory/retrieval/rankers/"),
        ("ENGRAM_SEARCH_ENTITY_SIMILARITY", "ENTITY_SIMILARITY in memory/retrieval/search.py"),
    ):
        result = start_django(
            DATABASE_URL="postgresql://u:p@127.0.0.1:1/x", ENGRAM_SECRET_KEY=KEY, **{name: "0.5"}
        )
        assert result.returncode != 0
        assert f"{name} was removed" in result.stderr
        assert constant in result.stderr


def test_it_requires_a_database_url() -> None:
    result = start_django(ENGRAM_ENV="local", ENGRAM_SECRET_KEY=KEY)
    assert result.returncode != 0
    assert "DATABASE_URL" in result.stderr


def test_it_starts_with_debug_off_by_default() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.DEBUG, settings.ALLOWED_HOSTS)",
        ],
        env={
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": "postgresql://u:p@127.0.0.1:1/x",
            "ENGRAM_SECRET_KEY": KEY,
        },
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split(" ", 1) == ["False", "['localhost', '127.0.0.1', '[::1]']\n"]


def test_it_refuses_a_model_configuration_it_cannot_run() -> None:
    """The extraction provider and the embedding model's settings, checked at start-up."""
    base = {"DATABASE_URL": "postgresql://u:p@127.0.0.1:1/x", "ENGRAM_SECRET_KEY": KEY}
    refused = {
        "ENGRAM_LLM_PROVIDER=claude needs ANTHROPIC_API_KEY": {"ENGRAM_LLM_PROVIDER": "claude"},
        "ENGRAM_LLM_PROVIDER=openai needs ENGRAM_LLM_MODEL": {"ENGRAM_LLM_PROVIDER": "openai"},
        "must be one of": {"ENGRAM_OPENAI_OUTPUT": "xml"},
        "ENGRAM_QUERY_PRECISION='fp16' must be one of int8, full": {
            "ENGRAM_QUERY_PRECISION": "fp16",
        },
        "at most 2000": {
            "ENGRAM_EMBEDDER": "openai-compatible", "ENGRAM_EMBEDDING_URL": "http://e/v1",
            "ENGRAM_EMBEDDING_DIMENSIONS": "3072",
        },
        "gives 384 dimensions": {"ENGRAM_EMBEDDING_DIMENSIONS": "768"},
        "(all-mpnet-base-v2) gives 768 dimensions": {
            "ENGRAM_LOCAL_MODEL": "all-mpnet-base-v2", "ENGRAM_EMBEDDING_DIMENSIONS": "384",
        },
        "ENGRAM_LOCAL_MODEL='bge-small' must be one of": {"ENGRAM_LOCAL_MODEL": "bge-small"},
    }  # fmt: skip
    for message, env in refused.items():
        result = start_django(**base, **env)
        assert result.returncode != 0 and message in result.stderr, (env, result.stderr[-300:])
    accepted = start_django(
        **base, ENGRAM_LLM_PROVIDER="openai", ENGRAM_LLM_MODEL="qwen3:8b",
        ENGRAM_EMBEDDER="openai-compatible", ENGRAM_EMBEDDING_URL="http://e/v1",
        ENGRAM_EMBEDDING_DIMENSIONS="768",
    )  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr[-300:]


def test_the_local_model_names_its_dimensions_and_its_folder() -> None:
    """ENGRAM_LOCAL_MODEL alone sets the vectors' dimension and where the model's files are."""
    probe = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.EMBEDDING_DIMENSIONS, settings.ENGRAM_MODEL_DIR.name)"
    )
    base = {
        "DJANGO_SETTINGS_MODULE": "config.settings", "PATH": os.environ["PATH"],
        "DATABASE_URL": "postgresql://u:p@127.0.0.1:1/x", "ENGRAM_SECRET_KEY": KEY,
    }  # fmt: skip
    for extra, printed in (
        ({}, "384 all-MiniLM-L6-v2"),
        ({"ENGRAM_LOCAL_MODEL": "all-mpnet-base-v2"}, "768 all-mpnet-base-v2"),
    ):
        result = subprocess.run(
            [sys.executable, "-c", probe],
            env={**base, **extra},
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-300:]
        assert result.stdout.strip() == printed
