"""Start-up checks (Django's system checks): `manage.py check --database default`, and every
`migrate`, which `make run`, the Docker image and CI run before anything serves.

- memory.E001: the settings name another embedding model than the one the deployment's vectors
  come from (memory.models.EmbeddingSpace): a process started so would write vectors search
  cannot compare. Set the settings back, or switch with `manage.py reembed`.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register

from memory.text.embeddings import configured_space, recorded_space


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
