"""The admin of organizations, projects, members and keys; and ProjectScopedAdmin, the base
of every admin of a tenant's rows (memory.admin)."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from django.contrib import admin
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict

from tenants.db import project_context
from tenants.models import ApiKey, Membership, Organization, Project

M = TypeVar("M", bound=models.Model)
EDITORS = (Membership.Role.OWNER, Membership.Role.ADMIN)


def visible_projects(request: HttpRequest) -> QuerySet[Project]:
    """The projects a staff user may browse: every one for a superuser, else those of the
    organizations they are a member of."""
    user = request.user
    projects = Project.objects.select_related("organization").order_by("organization__name", "name")
    if user.is_active and user.is_superuser:
        return projects
    if not (user.is_active and user.is_staff):
        return projects.none()
    return projects.filter(organization__memberships__user_id=user.pk)


def chosen_project(request: HttpRequest) -> Project | None:
    """The project of the request: `?project=` on a list, or the list's filters that the
    admin carries into a row's pages (`_changelist_filters`); None unless visible."""
    raw = request.GET.get("project")
    if raw is None:
        raw = QueryDict(request.GET.get("_changelist_filters", "")).get("project")
    try:
        project_id = uuid.UUID(str(raw))
    except ValueError:
        return None
    return visible_projects(request).filter(pk=project_id).first()


def can_edit(request: HttpRequest, project: Project | None) -> bool:
    user = request.user
    if project is None or not (user.is_active and user.is_staff):
        return False
    if user.is_superuser:
        return True
    return Membership.objects.filter(
        user_id=user.pk, organization_id=project.organization_id, role__in=EDITORS
    ).exists()


class ProjectFilter(admin.SimpleListFilter):
    title = "project"
    parameter_name = "project"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(p.pk), f"{p.organization.name} / {p.name}") for p in visible_projects(request)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        project = chosen_project(request)
        return queryset.filter(project=project) if project else queryset.none()


class ProjectScopedAdmin(admin.ModelAdmin[M]):
    """A tenant's rows in the admin. Row-level security shows them only inside their project's
    tenant context, so every page runs, and renders, inside the context of the project chosen
    in the list's "project" filter (carried to a row's pages by the admin's preserved filters):
    staff browsing across projects pick one at a time, among those of their organizations.
    Readers (members with the reader role) see; owners and admins may change. Nothing is
    added here. Read-only unless a subclass says otherwise (editable = True) and then writes
    through memory.actions."""

    editable = False

    def get_list_filter(self, request: HttpRequest) -> Any:
        return (ProjectFilter, *super().get_list_filter(request))

    def _in_project(self, request: HttpRequest, view: Any, *args: Any, **kwargs: Any) -> Any:
        project = chosen_project(request)
        with project_context(project.pk if project else None):
            response = view(request, *args, **kwargs)
            if isinstance(response, HttpResponse) and hasattr(response, "render"):
                response.render()  # the template reads rows: inside the tenant context
        return response

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        return self._in_project(request, super().changelist_view, extra_context)

    def change_view(self, request: HttpRequest, object_id: str, *args: Any, **kwargs: Any) -> Any:
        return self._in_project(request, super().change_view, object_id, *args, **kwargs)

    def delete_view(self, request: HttpRequest, object_id: str, *args: Any, **kwargs: Any) -> Any:
        return self._in_project(request, super().delete_view, object_id, *args, **kwargs)

    def history_view(self, request: HttpRequest, object_id: str, *args: Any, **kwargs: Any) -> Any:
        return self._in_project(request, super().history_view, object_id, *args, **kwargs)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return visible_projects(request).exists()

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return visible_projects(request).exists()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.editable and can_edit(request, chosen_project(request))

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.editable and can_edit(request, chosen_project(request))


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
