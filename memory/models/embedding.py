"""Which embedding model the deployment's vectors come from: `EmbeddingSpace`.

Every vector column (memory_memory.embedding, memory_entityvector.embedding) holds vectors of one
model, the `current` space. The first `migrate` records it from the settings; a process checks
its settings against it at start-up (memory.checks) and follows it while it runs
(memory.text.embeddings). `manage.py reembed` builds another model's vectors (a `building`
space) beside the current ones, in the columns' `embedding_next` twins, then switches: the new
space becomes `current`, the old one `retired`.

The vector columns have no fixed dimension (`vector`); the HNSW index is on the cast to the
current space's dimension, `(embedding::vector(N))`, which the search statement repeats
(memory.retrieval.search). The twins, the index and the trigger that keeps the twins honest
are SQL of their own (memory migration 0027, memory.actions.reembed), outside Django's models.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models


class EmbeddingSpace(models.Model):
    class State(models.TextChoices):
        CURRENT = "current"
        BUILDING = "building"
        RETIRED = "retired"

    class Embedder(models.TextChoices):
        LOCAL = "local"
        OPENAI_COMPATIBLE = "openai-compatible"

    id = models.BigAutoField(primary_key=True)
    # The model's identity: vectors of the same name are the same ("local:all-MiniLM-L6-v2",
    # "openai-compatible:<model>"; the export file's `embedding.model` too).
    name = models.CharField(max_length=300)
    embedder = models.CharField(max_length=20, choices=Embedder.choices)
    # A hosted model's endpoint and name (the key is the process's ENGRAM_EMBEDDING_API_KEY); a
    # local model's name (empty in a space recorded before there was a choice: all-MiniLM-L6-v2).
    url = models.CharField(max_length=2000, blank=True, default="")
    model = models.CharField(max_length=300, blank=True, default="")
    dimensions = models.PositiveIntegerField()
    send_dimensions = models.BooleanField(default=True)
    state = models.CharField(max_length=10, choices=State.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    # When it became the current space (null while building, and for the installed one).
    switched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["state"],
                condition=models.Q(state__in=["current", "building"]),
                name="embedding_space_one_per_state",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.dimensions}, {self.state})"
