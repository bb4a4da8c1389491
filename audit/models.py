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
