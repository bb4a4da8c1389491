"""Who may see which project in the operator dashboard, and the decorator every page uses.

Organization members see their organizations' projects: owners and admins may change memory,
readers only read. Superusers see every project, as owners. A project the user may not see
answers 404, as in the API (never 403, which would confirm it exists).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, cast

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from memory.actions import Actor
from tenants.db import project_context
from tenants.models import Membership, Project

EDITORS = (Membership.Role.OWNER, Membership.Role.ADMIN)


def member_projects(user: Any) -> QuerySet[Project]:
    projects = Project.objects.select_related("organization").order_by("organization__name", "name")
    if not user.is_active:
        return projects.none()
    if user.is_superuser:
        return projects
    return projects.filter(organization__memberships__user_id=user.pk)


def role_in(user: Any, project: Project) -> str | None:
    if user.is_superuser:
        return Membership.Role.OWNER
    return (
        Membership.objects.filter(user_id=user.pk, organization_id=project.organization_id)
        .values_list("role", flat=True)
        .first()
    )


@dataclass(frozen=True)
class Dashboard:
    """What a page knows about its project and its viewer (request.dashboard, and `dash` in
    every template)."""

    project: Project
    role: str
    actor: Actor

    @property
    def can_edit(self) -> bool:
        return self.role in EDITORS


def operator_page(
    *, write: bool = False, tenant: bool = True
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Wrap a view taking (request, dash, **kwargs) whose URL has `project_id`.

    Logs in first (redirect to the login page); 404 for a project the user may not see; 403
    when `write` (or any POST) and the user is a reader. The view runs in the project's tenant
    context, so every read and write goes through row-level security too; with `tenant=False`
    it opens the context itself, for a view that embeds text first (a hosted embedder is an
    HTTP call, never made inside a transaction).
    """

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @login_required
        @wraps(view)
        def wrapper(request: HttpRequest, project_id: uuid.UUID, **kwargs: Any) -> HttpResponse:
            user = cast(AbstractBaseUser, request.user)  # logged in: login_required
            project = member_projects(user).filter(pk=project_id).first()
            role = role_in(user, project) if project is not None else None
            if project is None or role is None:
                raise Http404("No such project.")
            dash = Dashboard(project=project, role=role, actor=Actor.staff(user))
            if (write or request.method == "POST") and not dash.can_edit:
                raise PermissionDenied("Readers cannot change anything.")
            request.dashboard = dash  # type: ignore[attr-defined]
            if not tenant:
                return view(request, dash, **kwargs)
            with project_context(project.pk):
                return view(request, dash, **kwargs)

        return wrapper

    return decorate


def dashboard_context(request: HttpRequest) -> dict[str, Any]:
    """Template context for the operator pages: `dash` and the switcher's projects."""
    dash = getattr(request, "dashboard", None)
    if dash is None:
        return {}
    return {"dash": dash, "switcher_projects": member_projects(request.user)}
