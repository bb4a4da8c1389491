"""Append-only records: the access log of every API request."""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.db import models

from tenants.models import KEY_PREFIX_LENGTH, ApiKey, Project


class AccessLog(models.Model):
    """One row per API request. The database refuses UPDATE and DELETE on this table.

    `project` and `api_key` are references without database constraints, so the log outlives
    the key or project it names and deleting them never has to touch (update) a log row.

    Unauthenticated requests (no key, a bad or revoked key) are logged with no project: they are
    operator security telemetry, readable outside any tenant context (the admin shows them to
    superusers). They keep the endpoint's route rather than the path (a path can name an end
    user) and no scope; see audit.middleware for what is stored and how it is sanitised.
    """

    APPEND_ONLY = True

    # A client-side UUID: inserts need no RETURNING, which row-level security would check
    # against the SELECT policy (and unauthenticated rows, with no project, fail that).
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(
        Project, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    # engram's own id for the request (also in the X-Request-ID response header and log lines).
    request_id = models.CharField(max_length=64)
    # The caller's X-Request-ID, when it had a plain shape; never used as our id.
    client_request_id = models.CharField(max_length=64, blank=True)
    # The first characters of the presented API key (not secret; shown in the admin), also for
    # failed authentications, when they have the shape of one of our prefixes.
    key_prefix = models.CharField(max_length=KEY_PREFIX_LENGTH, blank=True)
    # REMOTE_ADDR, or the address the trusted proxies saw (ENGRAM_TRUSTED_PROXY_HOPS).
    client_address = models.GenericIPAddressField(null=True, blank=True)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=500)
    action = models.CharField(max_length=100, blank=True)
    # Scope ids the request touched, e.g. {"user_id": ["alice"]}.
    scope = models.JSONField(default=dict, blank=True)
    # The client's identity headers as sent (audit.access.CLIENT_HEADERS), e.g.
    # {"X-Mem0-Client": "mem0-python/2.2.1"}; kept for unauthenticated requests too.
    client = models.JSONField(default=dict, blank=True)
    result_count = models.IntegerField(null=True)
    status = models.PositiveSmallIntegerField()
    duration_ms = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes: ClassVar = [
            models.Index(fields=["project", "created_at"], name="accesslog_project_time"),
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path} {self.status}"


class PurgeRecord(models.Model):
    """One row per erasure (GDPR): what was removed, never whose data it was.

    Written only by the database functions `engram_erase_user` (audit migration 0008),
    `engram_erase_memories` and `engram_purge_events` (0012), in the erasure's own
    transaction. It holds the project, the kind of subject ("user", "memory", "retention"), a
    salted hash of the erased id (memory.actions.erasure_subject_hash: HMAC-SHA256 with a key
    derived from SECRET_KEY), the number of rows removed or rewritten per store, and who
    asked. No text, no id in clear. Append-only in the database like the access log: the
    application role may only read and insert, and the trigger refuses UPDATE and DELETE for
    every role, erasure included.
    """

    APPEND_ONLY = True

    class Subject(models.TextChoices):
        USER = "user"  # engram_erase_user: one end user, every store
        MEMORY = "memory"  # engram_erase_memories: one memory redacted
        RETENTION = "retention"  # purge_expired: deleted memories, event payloads past retention

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No database constraint: the record outlives the project it names.
    project = models.ForeignKey(
        Project, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    subject_kind = models.CharField(max_length=20, choices=Subject.choices)
    subject_hash = models.CharField(max_length=64)
    # Rows per store: {"memories": 3, "history": 5, "access_log": 2, …}.
    counts = models.JSONField(default=dict)
    # Who asked: "command:purge_user", "api:<key prefix>", "user:<username>", …
    actor = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes: ClassVar = [
            models.Index(fields=["project", "created_at"], name="purgerecord_project_time"),
            models.Index(fields=["subject_hash"], name="purgerecord_subject"),
        ]

    def __str__(self) -> str:
        return f"purge of {self.subject_kind} {self.subject_hash[:12]}…"


class ErasureRequest(models.Model):
    """An erasure of one user asked through the API, carried out by a worker.

    `DELETE /v2/entities/user/{id}/` hides the user's memories at once (the soft delete) and
    records this request; the worker job (memory.extraction.tasks.erase_user) then runs the one
    erasure path (engram_erase_user, which writes the PurgeRecord) and marks the request done.
    The user id in clear (`subject_id`) is kept only until then, for the worker to know whom to
    erase, and cleared in the erasure's own transaction; `subject_hash` stays. Row-level
    security as every tenant table.
    """

    class Status(models.TextChoices):
        PENDING = "PENDING"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    subject_kind = models.CharField(max_length=20, default="user")
    subject_hash = models.CharField(max_length=64)
    subject_id = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    counts = models.JSONField(default=dict, blank=True)
    actor = models.CharField(max_length=200)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes: ClassVar = [
            models.Index(fields=["project", "created_at"], name="erasure_project_time"),
            # The requests not yet done, by user: the webhooks' outbox trigger asks at every
            # history row, and their rendering at every delivery, whether its user's erasure
            # is asked (webhooks migration 0003, webhooks.render); a done one has no id in clear.
            models.Index(
                fields=["project", "subject_id"],
                name="erasure_unfinished_subject",
                condition=~models.Q(subject_id=""),
            ),
        ]

    def __str__(self) -> str:
        return f"erasure of {self.subject_kind} {self.subject_hash[:12]}… ({self.status})"
