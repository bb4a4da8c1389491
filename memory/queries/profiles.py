"""User profiles' reads: the project's settings, one user's profile, jobs, the profiles due for
a refresh, and a user's memories as the input of a generation (the most useful first).

Each runs in the caller's tenant context (tenants.db.project_context), or opens one.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, F, Q

from memory.models import Memory, ProfileJob, ProfileSettings, UserProfile
from tenants.db import project_context


@dataclass(frozen=True)
class ProfileSource:
    """One memory a profile may be built from."""

    id: uuid.UUID
    text: str
    created_at: datetime


def profile_settings(project_id: uuid.UUID) -> ProfileSettings:
    """The project's settings; unsaved defaults (disabled, no schema) when it has none."""
    with project_context(project_id):
        found = ProfileSettings.objects.filter(project_id=project_id).first()
    return found or ProfileSettings(project_id=project_id)


def user_profile(project_id: uuid.UUID, user_id: str) -> UserProfile | None:
    with project_context(project_id):
        return UserProfile.objects.filter(project_id=project_id, user_id=user_id).first()


def user_profile_by_id(project_id: uuid.UUID, profile_id: int) -> UserProfile | None:
    with project_context(project_id):
        return UserProfile.objects.filter(project_id=project_id, pk=profile_id).first()


def user_is_known(project_id: uuid.UUID, user_id: str) -> bool:
    """Whether the project has this user: a memory of theirs (in any state) or a profile."""
    with project_context(project_id):
        return (
            Memory.objects.for_project(project_id).filter(user_id=user_id).exists()
            or UserProfile.objects.filter(project_id=project_id, user_id=user_id).exists()
        )


def profile_job(project_id: uuid.UUID, job_id: uuid.UUID) -> ProfileJob | None:
    with project_context(project_id):
        return ProfileJob.objects.filter(project_id=project_id, pk=job_id).first()


def last_sample(project_id: uuid.UUID) -> ProfileJob | None:
    with project_context(project_id):
        return (
            ProfileJob.objects.filter(project_id=project_id, operation=ProfileJob.Operation.SAMPLE)
            .order_by("-created_at")
            .first()
        )


def sample_users(project_id: uuid.UUID, limit: int, min_memories: int) -> list[str]:
    """Up to `limit` users with at least `min_memories` active memories, those with the most
    first (ties by id, so a sample is reproducible)."""
    with project_context(project_id):
        rows = (
            Memory.objects.for_project(project_id)
            .active()
            .exclude(user_id=None)
            .values("user_id")
            .annotate(n=Count("id"))
            .filter(n__gte=min_memories)
            .order_by("-n", "user_id")[:limit]
        )
        return [row["user_id"] for row in rows]


def due_profiles(project_id: uuid.UUID, now: datetime, delay: timedelta) -> list[int]:
    """The profiles to regenerate now: stale (their memories changed after the watermark of
    their last generation), unchanged for `delay`, not attempted within `delay`, and not
    queued (or queued longer ago than ten times `delay`: a send that was lost)."""
    quiet = now - delay
    with project_context(project_id):
        return list(
            UserProfile.objects.filter(project_id=project_id, changed_at__lte=quiet)
            .filter(Q(generated_through=None) | Q(changed_at__gt=F("generated_through")))
            .filter(Q(attempted_at=None) | Q(attempted_at__lte=quiet))
            .filter(Q(queued_at=None) | Q(queued_at__lt=now - 10 * delay))
            .order_by("changed_at")
            .values_list("pk", flat=True)[:500]
        )


def profile_sources(project_id: uuid.UUID, user_id: str, limit: int) -> list[ProfileSource]:
    """The user's active, unexpired memories, at most `limit`, the most useful first: pinned
    (immutable) ones, then facts extracted by the model (not stored messages), newest first."""
    with project_context(project_id):
        rows = (
            Memory.objects.for_project(project_id)
            .light()
            .active()
            .unexpired()
            .filter(user_id=user_id)
            .order_by("-immutable", "role", "-updated_at", "id")
            .values_list("id", "text", "created_at")[:limit]
        )
        return [ProfileSource(*row) for row in rows]


def count_sources(project_id: uuid.UUID, user_id: str) -> int:
    with project_context(project_id):
        return (
            Memory.objects.for_project(project_id)
            .active()
            .unexpired()
            .filter(user_id=user_id)
            .count()
        )


def profile_job_by_key(project_id: uuid.UUID, key: str) -> ProfileJob | None:
    with project_context(project_id):
        return ProfileJob.objects.filter(project_id=project_id, idempotency_key=key).first()


def profile_card(project_id: uuid.UUID, user_id: str) -> dict[str, Any] | None:
    """What the dashboards show of a user's profile (templates/web/includes/_profile.html):
    None while the project's profiles are not enabled with a schema. In the caller's tenant
    context: one query, two when profiles are enabled."""
    found = ProfileSettings.objects.filter(project_id=project_id).first()
    if found is None or not (found.enabled and (found.schema or {}).get("properties")):
        return None
    row = UserProfile.objects.filter(project_id=project_id, user_id=user_id).first()
    if row is None:
        return {"status": UserProfile.Status.PENDING, "fields": [], "updated_at": None,
                "generation_count": 0, "generator": "", "stale": False}  # fmt: skip
    fields = []
    if row.status == UserProfile.Status.SUCCEEDED:
        fields = [(name, _shown(value)) for name, value in row.profile.items()]
    stale = row.changed_at is not None and (
        row.generated_through is None or row.changed_at > row.generated_through
    )
    return {
        "status": row.status,
        "fields": fields,
        "updated_at": row.updated_at,
        "generation_count": row.generation_count,
        "generator": row.generator,
        "stale": stale,
    }


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(_shown(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
