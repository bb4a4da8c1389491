"""Webhooks of a project, and their deliveries (the outbox and the delivery log in one table).

A Delivery holds ids only: the history row it is about (or, for erasure_complete, the purge
record), the memory's id, never a memory's text nor a scope id. Its body is rendered when it
is sent, from the history row, which erasure and redaction reach (audit migrations): so a
user erased before their delivery went out leaves nothing in the outbox to send, and the
delivery is DROPPED.
"""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.db import models

from tenants.models import ApiKey, Project

# The events a webhook may subscribe to: the Platform's four, and engram's erasure_complete.
MEMORY_ADD = "memory_add"
MEMORY_UPDATE = "memory_update"
MEMORY_DELETE = "memory_delete"
MEMORY_CATEGORIZE = "memory_categorize"
ERASURE_COMPLETE = "erasure_complete"
EVENT_TYPES = (MEMORY_ADD, MEMORY_UPDATE, MEMORY_DELETE, MEMORY_CATEGORIZE, ERASURE_COMPLETE)
URL_MAX_LENGTH = 2048
NAME_MAX_LENGTH = 200
RESPONSE_PREFIX_CHARS = 200  # of a receiver's answer, kept on the delivery for the dashboard


class Webhook(models.Model):
    """Where a project's events are POSTed, which ones, and with what secret they are signed.

    `enabled` goes false after ENGRAM_WEBHOOK_DISABLE_AFTER failed attempts in a row, or when
    the API key that created it is revoked (the trigger of migration 0002), with the reason; an
    operator re-enables it (the dashboard, or PUT is_active).
    """

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    url = models.CharField(max_length=URL_MAX_LENGTH)
    event_types = models.JSONField(default=list)
    # HMAC-SHA256 key of the Engram-Signature header; shown once (creation, rotation).
    secret = models.CharField(max_length=100)
    enabled = models.BooleanField(default=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.TextField(blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # The API key that created it (None: made otherwise, or before migration 0002). No
    # database constraint: a key deleted in the admin must not need its webhooks (out of sight
    # there, under row-level security) updated first; an id of no key is never revoked.
    created_by_key = models.ForeignKey(
        ApiKey,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # the trigger finds a key's webhooks among its project's (20 at most)
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes: ClassVar = [models.Index(fields=["project", "enabled"], name="webhook_project")]

    def __str__(self) -> str:
        return f"{self.name} -> {self.url}"


class Delivery(models.Model):
    """One event for one webhook: queued, tried, and what came of it (the outbox and its log).

    PENDING until DELIVERED (a 2xx), FAILED (ENGRAM_WEBHOOK_MAX_ATTEMPTS attempts failed) or
    DROPPED (nothing left to send: the history row erased or redacted since).
    """

    class Status(models.TextChoices):
        PENDING = "PENDING"
        DELIVERED = "DELIVERED"
        FAILED = "FAILED"
        DROPPED = "DROPPED"

    # Sent as Engram-Delivery: the receiver deduplicates on it (delivery is at least once).
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event_type = models.CharField(max_length=40)
    # What it is about: a memory_memoryhistory row and its memory, or a purge record (erasure).
    history_id = models.UUIDField(null=True, blank=True)
    memory_id = models.UUIDField(null=True, blank=True)
    subject_id = models.UUIDField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    # A worker holds the delivery until then; after it, the sweeper may send it again.
    lease_until = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_response = models.CharField(max_length=RESPONSE_PREFIX_CHARS, blank=True)
    last_duration_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        indexes: ClassVar = [
            models.Index(fields=["status", "next_attempt_at"], name="delivery_due"),
            models.Index(fields=["project", "created_at"], name="delivery_project_time"),
            models.Index(fields=["webhook", "created_at"], name="delivery_webhook_time"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.status} ({self.id})"
