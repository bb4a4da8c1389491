from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from tenants.models import ApiKey, Membership, Organization, Project


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin[Organization]):
    list_display = ("name", "id", "created_at")
    search_fields = ("name",)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin[Project]):
    list_display = ("name", "organization", "id", "created_at")
    list_filter = ("organization",)
    search_fields = ("name",)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin[Membership]):
    list_display = ("user", "organization", "role")
    list_filter = ("role",)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    list_display = ("name", "prefix", "project", "created_at", "last_used_at", "revoked_at")
    list_filter = ("project",)
    # Keys are minted with `create_api_key` (the raw key is shown once); the admin can only revoke.
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at", "created_by", "project")
    fields = ("name", "project", "prefix", "created_by", "created_at", "last_used_at", "revoked_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        # Only the editable columns: the application role may not UPDATE the others
        # (tenants.db.NARROW_PRIVILEGES), and a plain save() writes every column.
        obj.save(update_fields=["name", "revoked_at"])
