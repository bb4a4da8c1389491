"""Organizations, their projects (the tenant), members and API keys."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone

KEY_PREFIX_LENGTH = 16  # "eng_" + 12 random characters (72 bits): unique, indexed, safe to show


class Organization(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Project(models.Model):
    """The tenant. Every memory, event and log row belongs to exactly one project."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="projects"
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    # Per-project extraction settings (Mem0's project options), used by the extraction pipeline.
    custom_instructions = models.TextField(blank=True)
    custom_categories = models.JSONField(default=list, blank=True)
    # What extraction only remembers, and never remembers (Mem0's includes/excludes), for every
    # add request of the project; an add request's own replace them for that request.
    includes = models.TextField(blank=True)
    excludes = models.TextField(blank=True)
    # Retention (purge_expired): days a deleted memory, and an add request's messages and
    # results, are kept before they are erased for good. Empty: the server's default
    # (ENGRAM_DELETED_RETENTION_DAYS, ENGRAM_EVENT_RETENTION_DAYS); 0: kept for ever.
    deleted_retention_days = models.PositiveIntegerField(null=True, blank=True)
    event_retention_days = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["organization", "name"], name="project_name_unique_in_org"
            )
        ]

    def __str__(self) -> str:
        return f"{self.organization.name}/{self.name}"


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner"
        ADMIN = "admin"
        READER = "reader"

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.READER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["organization", "user"], name="one_membership_per_org")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} ({self.role})"


def hash_key(raw_key: str) -> str:
    # Keys carry 256 random bits, so a plain SHA-256 is enough; a slow KDF would only slow auth.
    return hashlib.sha256(raw_key.encode()).hexdigest()


class ApiKeyQuerySet(models.QuerySet["ApiKey"]):
    def active(self) -> ApiKeyQuerySet:
        return self.filter(revoked_at__isnull=True)


class ApiKey(models.Model):
    """A project's API key. Only its SHA-256 is stored; the raw key is shown once, at creation.

    Not under row-level security: a key must be found before its project is known. It holds no
    memory data, only a hash, and every lookup goes through `authenticate`.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, default="default")
    prefix = models.CharField(max_length=KEY_PREFIX_LENGTH, unique=True)
    key_hash = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def generate() -> tuple[str, str, str]:
        """Return (raw key, prefix, hash) for a new key."""
        raw = "eng_" + secrets.token_urlsafe(32)
        return raw, raw[:KEY_PREFIX_LENGTH], hash_key(raw)

    def matches(self, raw_key: str) -> bool:
        return hmac.compare_digest(self.key_hash, hash_key(raw_key))

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def revoke(self) -> None:
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])
