"""User profiles: the project's settings, the jobs asked through the API, and what the worker
records of a generation (memory.extraction.profiles).

A profile row exists for every user whose profile may be generated: made when profiles are
enabled (every user with memories), by the history trigger of memory 0025 (a user whose
memories change), or by a job naming the user. Generations only ever update an existing row,
so a user erased meanwhile (engram_erase_user deletes the row) is never written back.

May import memory.models, memory.jobs, tenants and Django.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from memory import jobs
from memory.actions.common import UNSET
from memory.models import Memory, ProfileJob, ProfileSettings, UserProfile
from tenants.db import project_context


def do_update_profile_settings(
    project_id: uuid.UUID,
    *,
    enabled: bool | None = None,
    schema: Any = UNSET,
    custom_instructions: Any = UNSET,
) -> ProfileSettings:
    """Write the given settings (UNSET leaves one unchanged, None clears it). Enabling them,
    or changing the schema or instructions while enabled, makes every user's profile stale:
    each is rebuilt after the debounce delay, one by one, by the worker."""
    with project_context(project_id):
        found, _ = ProfileSettings.objects.select_for_update().get_or_create(project_id=project_id)
        before = (found.enabled, found.schema, found.custom_instructions)
        if enabled is not None:
            found.enabled = enabled
        if schema is not UNSET:
            found.schema = schema
        if custom_instructions is not UNSET:
            found.custom_instructions = custom_instructions
        found.save()
        if found.enabled and before != (found.enabled, found.schema, found.custom_instructions):
            _mark_every_profile_stale(project_id)
        return found


def _mark_every_profile_stale(project_id: uuid.UUID) -> None:
    users = (
        Memory.objects.for_project(project_id)
        .active()
        .exclude(user_id=None)
        .values_list("user_id", flat=True)
        .distinct()
    )
    ensure_profiles(project_id, [u for u in users if u])
    UserProfile.objects.filter(project_id=project_id).update(changed_at=timezone.now())


def ensure_profiles(project_id: uuid.UUID, user_ids: Iterable[str]) -> None:
    """A pending profile row for each of these users that has none (in the caller's context)."""
    UserProfile.objects.bulk_create(
        [
            UserProfile(project_id=project_id, user_id=u, changed_at=timezone.now())
            for u in user_ids
        ],
        ignore_conflicts=True,
    )


def do_create_profile_job(
    project_id: uuid.UUID, operation: str, entity_ids: Sequence[str], key: str
) -> tuple[ProfileJob, bool]:
    """The job for this Idempotency-Key: a new one, queued for the worker once committed, or
    the one the key made before (True: a replay, nothing new is queued)."""
    with project_context(project_id):
        earlier = ProfileJob.objects.filter(project_id=project_id, idempotency_key=key).first()
        if earlier is not None:
            return earlier, True
        try:
            with transaction.atomic():
                job = ProfileJob.objects.create(
                    project_id=project_id,
                    operation=operation,
                    entity_ids=list(entity_ids),
                    idempotency_key=key,
                )
        except IntegrityError:  # the same key, at the same moment: the other one won
            return ProfileJob.objects.get(project_id=project_id, idempotency_key=key), True
        ensure_profiles(project_id, entity_ids)
        args = (str(job.id), str(project_id))
        # A lost send leaves the job QUEUED; asking again with a new key starts another.
        transaction.on_commit(lambda: jobs.RUN_PROFILE_JOB.send(*args), robust=True)
    return job, False


def do_start_profile_job(project_id: uuid.UUID, job_id: uuid.UUID) -> ProfileJob | None:
    """Claim a queued job for this worker (None: gone, or claimed already)."""
    with project_context(project_id):
        claimed = ProfileJob.objects.filter(
            project_id=project_id, pk=job_id, status=ProfileJob.Status.QUEUED
        ).update(status=ProfileJob.Status.RUNNING, started_at=timezone.now())
        if not claimed:
            return None
        return ProfileJob.objects.get(pk=job_id)


def do_count_profile_job(project_id: uuid.UUID, job_id: uuid.UUID, outcome: str) -> None:
    """Count one user's outcome on the job: succeeded, failed or skipped."""
    if outcome not in ("succeeded", "failed", "skipped"):
        raise ValueError(f"unknown outcome {outcome!r}")
    with project_context(project_id):
        ProfileJob.objects.filter(project_id=project_id, pk=job_id).update(
            **{outcome: F(outcome) + 1}
        )


def do_finish_profile_job(project_id: uuid.UUID, job_id: uuid.UUID) -> None:
    """End a running job: FAILED when every generation failed, SUCCEEDED otherwise."""
    with project_context(project_id):
        job = ProfileJob.objects.filter(project_id=project_id, pk=job_id).first()
        if job is None:
            return
        failed = job.failed > 0 and job.succeeded + job.skipped == 0
        job.status = ProfileJob.Status.FAILED if failed else ProfileJob.Status.SUCCEEDED
        job.completed_at = timezone.now()
        job.save(update_fields=["status", "completed_at"])


def do_fail_stuck_profile_jobs(project_id: uuid.UUID, started_before: datetime) -> int:
    """End the jobs still RUNNING since before `started_before` (their worker died): FAILED."""
    with project_context(project_id):
        return ProfileJob.objects.filter(
            project_id=project_id,
            status=ProfileJob.Status.RUNNING,
            started_at__lt=started_before,
        ).update(status=ProfileJob.Status.FAILED, completed_at=timezone.now())


def do_queue_profile_refreshes(project_id: uuid.UUID, profile_ids: Sequence[int]) -> int:
    """Send a refresh for each of these profiles not already queued; return how many."""
    with project_context(project_id):
        ids = list(
            UserProfile.objects.select_for_update(skip_locked=True)
            .filter(project_id=project_id, pk__in=profile_ids, queued_at=None)
            .values_list("pk", flat=True)
        )
        UserProfile.objects.filter(pk__in=ids).update(queued_at=timezone.now())
        for profile_id in ids:
            args = (profile_id, str(project_id))
            # A lost send leaves queued_at set: the refresher sends it again once that is
            # older than its stuck delay (memory.queries.profiles.due_profiles).
            transaction.on_commit(
                lambda args=args: jobs.REFRESH_PROFILE.send(*args),  # type: ignore[misc]
                robust=True,
            )
    return len(ids)


def do_release_profile(project_id: uuid.UUID, profile_id: int) -> None:
    """A refresh that found nothing to do (profiles off, or no schema): no longer queued, and
    not due again until the user's memories change or the settings do (each moves the
    profile's watermark), so the sweeper does not send it round after round."""
    with project_context(project_id):
        UserProfile.objects.filter(project_id=project_id, pk=profile_id).update(
            queued_at=None, attempted_at=timezone.now(), generated_through=F("changed_at")
        )


def do_record_profile(
    project_id: uuid.UUID,
    profile_id: int,
    *,
    status: str,
    through: datetime | None,
    profile: dict[str, Any] | None = None,
    memory_ids: Sequence[uuid.UUID] = (),
    generator: str = "",
    usage: dict[str, int] | None = None,
    error: str = "",
) -> bool:
    """Record one generation of a profile (False: the row is gone, e.g. the user was erased).

    `through` is the source watermark the generation read before its memories: a change
    that landed during it leaves the profile stale, for the next refresh. A failure keeps
    the previous profile (and its status, once it has one) and is not retried until the
    user's memories change again or a job asks for it: a failing generation never loops.
    """
    with project_context(project_id):
        row = UserProfile.objects.select_for_update().filter(pk=profile_id).first()
        if row is None:
            return False
        now = timezone.now()
        if status != UserProfile.Status.FAILED and _outdated(row, through, memory_ids):
            # The memories changed while it was built (a redaction, a purge, an erasure of
            # some of them, a new memory): what it read may be gone, and must not come back.
            # Nothing is written but the attempt; the next refresh builds from what is there.
            row.queued_at, row.attempted_at = None, now
            row.save(update_fields=["queued_at", "attempted_at"])
            return True
        row.attempted_at = now
        row.queued_at = None
        row.generated_through = through
        row.error = error[:2000]
        if generator:
            row.generator = generator
        total = dict(row.usage or {})
        for name, value in (usage or {}).items():
            total[name] = int(total.get(name) or 0) + int(value)
        row.usage = total
        if status == UserProfile.Status.FAILED:
            if not row.profile:
                row.status = status
        else:
            row.status = status
            row.profile = profile or {}
            row.memory_ids = list(memory_ids)
            if status == UserProfile.Status.SUCCEEDED:
                row.generation_count += 1
                row.updated_at = now
        row.save()
        return True


def _outdated(row: UserProfile, through: datetime | None, memory_ids: Sequence[uuid.UUID]) -> bool:
    """Whether a generation that read the memories as of `through` (and used `memory_ids`)
    is older than what the user's memories are now."""
    if row.changed_at != through:
        return True
    if not memory_ids:
        return False
    active = Memory.objects.filter(project_id=row.project_id, pk__in=memory_ids).active()
    return active.count() != len(set(memory_ids))
