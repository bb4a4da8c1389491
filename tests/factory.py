"""Small builders for test rows: each creates exactly what a test asks for."""

from __future__ import annotations

import uuid
from typing import Any

from django.utils import timezone

from memory.actions import Message, do_add_messages
from memory.models import Memory, content_hash, structured_attributes
from tenants.actions import NewApiKey, do_create_api_key
from tenants.models import Project

# A fixed unit vector: tests that do not search need no real embedding.
UNIT = [1.0] + [0.0] * 383


def make_key(org: str = "acme", project: str = "main", **kwargs: Any) -> NewApiKey:
    return do_create_api_key(org_name=org, project_name=project, **kwargs)


def auth(raw_key: str, scheme: str = "Token") -> dict[str, str]:
    """Headers for the Django test client's `headers=` argument."""
    return {"Authorization": f"{scheme} {raw_key}"}


def make_memory(
    project: Project | uuid.UUID, text: str = "User likes tea", **kwargs: Any
) -> Memory:
    """Insert one memory directly (the caller must be in the project's tenant context)."""
    project_id = project.pk if isinstance(project, Project) else project
    moment = kwargs.pop("created_at", None) or timezone.now()
    kwargs.setdefault("embedding", UNIT)
    kwargs.setdefault("user_id", "alice")
    return Memory.objects.create(
        project_id=project_id,
        text=text,
        hash=content_hash(text),
        created_at=moment,
        updated_at=kwargs.pop("updated_at", moment),
        structured_attributes=structured_attributes(moment),
        **kwargs,
    )


def add_texts(project: Project, texts: list[str], **scope: str) -> list[Memory]:
    """Store texts through the real add action (real embeddings); returns the new memories."""
    outcome = do_add_messages(
        project,
        messages=[Message("user", t) for t in texts],
        scope={"user_id": None, "agent_id": None, "app_id": None, "run_id": None, **scope},
        actor="test",
    )
    return [m for m, _ in outcome.results]
