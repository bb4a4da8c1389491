from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.models import AccessLog, ErasureRequest, PurgeRecord
from tenants.admin import ProjectScopedAdmin


@admin.register(AccessLog)
class AccessLogAdmin(admin.ModelAdmin[AccessLog]):
    """Requests without a project (no key, a bad or revoked one): security telemetry.

    Superusers only, read-only. The admin runs outside any tenant context, where row-level
    security shows exactly these rows (audit migration 0006); a project's own requests belong
    to that project's dashboard.
    """

    list_display = (
        "created_at",
        "method",
        "path",
        "status",
        "key_prefix",
        "client_address",
        "request_id",
        "client_request_id",
    )
    list_filter = ("status", "method")
    search_fields = ("=request_id", "=client_request_id", "=key_prefix")
    ordering = ("-created_at",)
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[AccessLog]:
        return super().get_queryset(request).filter(project__isnull=True)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: AccessLog | None = None) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AccessLog | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AccessLog | None = None) -> bool:
        return False


@admin.register(PurgeRecord)
class PurgeRecordAdmin(ProjectScopedAdmin[PurgeRecord]):
    """What each erasure, redaction and retention purge removed (counts, a salted hash of the
    subject, who asked, when): no personal data. Read-only, in the chosen project's context."""

    list_display = ("created_at", "subject_kind", "subject_hash", "actor", "counts")
    list_filter = ("subject_kind",)
    search_fields = ("=subject_hash", "actor")
    ordering = ("-created_at",)


@admin.register(ErasureRequest)
class ErasureRequestAdmin(ProjectScopedAdmin[ErasureRequest]):
    """Erasures asked through the API or an end user's dashboard, and how they went."""

    list_display = ("created_at", "status", "attempts", "actor", "completed_at", "error")
    list_filter = ("status",)
    search_fields = ("=subject_hash", "actor")
    ordering = ("-created_at",)
