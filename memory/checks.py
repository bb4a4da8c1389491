"""Start-up checks (Django's system checks): `manage.py check --database default`, and every
`migrate`, which `make run`, the Docker image and CI run before anything serves.

- memory.E001: the settings name another embedding model than the one the deployment's vectors
  come from (memory.models.EmbeddingSpace): a process started so would write vectors search
  cannot compare. Set the settings back, or switch with `manage.py reembed`.
- memory.E002: the fitted ranker search would score with (memory/retrieval/rankers/: the
  configured model's file, else the bundled model's) cannot be read or was fitted on other
  features: every search would fail. Fit it again (bench/fit_ranker.py --write).
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register

from memory.retrieval import scoring
from memory.text.embeddings import configured_space, recorded_space


@register()
def ranker_can_be_read(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    model = configured_space().name
    try:
        scoring.ranker_for(model)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [
            Error(
                f"The fitted ranker for {model} cannot be used: {exc}",
                hint="Fit it again on a recording of the benchmark sets: "
                "bench/fit_ranker.py RECORDING --write (docs: Development, fitting the ranker).",
                id="memory.E002",
            )
        ]
    return []


@register(Tags.database)
def embedding_model_matches(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not kwargs.get("databases"):
        return []
    recorded = recorded_space()
    configured = configured_space()
    if recorded is None or recorded.same_model(configured):
        return []  # not installed yet (the first migrate records it), or the same
    return [
        Error(
            f"The settings name the embedding model {configured.name} "
            f"({configured.dimensions} dimensions), but this deployment's vectors come from "
            f"{recorded.name} ({recorded.dimensions} dimensions).",
            hint=(
                "Set ENGRAM_EMBEDDER, ENGRAM_LOCAL_MODEL, ENGRAM_EMBEDDING_URL, "
                "ENGRAM_EMBEDDING_MODEL, ENGRAM_EMBEDDING_DIMENSIONS and "
                "ENGRAM_EMBEDDING_SEND_DIMENSIONS back to the "
                "deployment's, or switch models with `manage.py reembed` run with the new "
                "settings (docs: Operations, switching the embedding model)."
            ),
            id="memory.E001",
        )
    ]
