from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from audit.models import AccessLog


@admin.register(AccessLog)
class AccessLogAdmin(admin.ModelAdmin[AccessLog]):
    list_display = ("created_at", "method", "path", "status", "project", "result_count")
    list_filter = ("status", "method")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AccessLog | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AccessLog | None = None) -> bool:
        return False
