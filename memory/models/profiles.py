"""User profiles (the Platform's /v2/profiles/ and /v2/entities/user/{id}/profile/): a project's
settings, one profile per user, and the jobs that build them (memory.extraction.profiles)."""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from memory.models.scopes import SCOPE_MAX_LENGTH
from tenants.models import Project


class ProfileSettings(models.Model):
    """A project's user-profile settings (the Platform's /v2/profiles/settings/): whether
    profiles are generated, the JSON Schema they follow (each property with a description)
    and the extra instructions for the model. One row per project, made on first write; no
    row reads as disabled with no schema."""

    id = models.BigAutoField(primary_key=True)
    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="+")
    enabled = models.BooleanField(default=False)
    schema = models.JSONField(null=True, blank=True)
    custom_instructions = models.TextField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "profile settings"

    def __str__(self) -> str:
        return f"profiles {'on' if self.enabled else 'off'}"


class UserProfile(models.Model):
    """One user's profile: an object shaped by the project's schema, built by the worker
    (memory.extraction.profiles) from the user's active memories and graph.

    `changed_at` is the source watermark: the time of the last change to the user's memories
    (a trigger on memory_memoryhistory sets it, migration 0025), or of the settings. A profile
    is stale while `changed_at` is later than `generated_through`, the watermark its last
    generation read; it is regenerated no sooner than the debounce delay after `changed_at`
    and after `attempted_at` (memory.queries.profiles.due_profiles). `memory_ids` are the
    memories it was built from: redacting one of them clears the profile at once."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        INSUFFICIENT_DATA = "insufficient_data"

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    user_id = models.CharField(max_length=SCOPE_MAX_LENGTH)
    profile = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    generation_count = models.PositiveIntegerField(default=0)
    # When the profile was last written by a generation that succeeded.
    updated_at = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(null=True, blank=True)
    generated_through = models.DateTimeField(null=True, blank=True)
    attempted_at = models.DateTimeField(null=True, blank=True)
    # When a refresh was sent to the worker (one at a time); cleared when it has run.
    queued_at = models.DateTimeField(null=True, blank=True)
    memory_ids = ArrayField(models.UUIDField(), default=list, blank=True)
    # "claude" or "openai" (the model's provider), or "graph" (the deterministic generator),
    # of the last generation.
    generator = models.CharField(max_length=20, blank=True, default="")
    error = models.TextField(blank=True, default="")
    # Model usage of every generation, summed ({"calls", "input_tokens", "output_tokens"}).
    usage = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "user_id"], name="one_profile_per_user")
        ]
        indexes: ClassVar = [
            models.Index(fields=["project", "changed_at"], name="profile_changed"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.status}"


class ProfileJob(models.Model):
    """One generation asked through the API (POST /v2/profiles/jobs/): one user ("trigger")
    or a few picked by the server ("sample"). QUEUED -> RUNNING -> SUCCEEDED | FAILED, counted
    per user: succeeded, failed (the generation raised) and skipped (insufficient data)."""

    class Operation(models.TextChoices):
        TRIGGER = "trigger"
        SAMPLE = "sample"

    class Status(models.TextChoices):
        QUEUED = "QUEUED"
        RUNNING = "RUNNING"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    operation = models.CharField(max_length=10, choices=Operation.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    entity_ids = ArrayField(models.CharField(max_length=SCOPE_MAX_LENGTH), default=list)
    idempotency_key = models.CharField(max_length=128)
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["project", "idempotency_key"], name="profile_job_key_once"
            )
        ]
        indexes: ClassVar = [
            models.Index(fields=["project", "operation", "created_at"], name="profile_job_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.operation} {self.status}"
