"""Login, logout and the project list of the operator dashboard."""

from __future__ import annotations

import uuid

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.decorators import method_decorator

from config.logins import limit_failed_logins
from memory.web.common import member_projects

PROJECTS_SHOWN = 200  # the projects listed at once; a search finds the others


# The admin's limit on failed logins, with the same count per client address.
@method_decorator(limit_failed_logins, name="dispatch")
class LoginView(auth_views.LoginView):
    template_name = "web/operator/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    next_page = "web:login"


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The projects this person may see, how many, and a search by organization or project
    name (a superuser sees every project); with one only, go straight to it."""
    mine = member_projects(request.user)
    find = str(request.GET.get("find", ""))[:200]  # a NUL is refused before (config.inputs)
    total = mine.count()
    if total == 1 and not find:
        only = mine.first()
        if only is not None:
            return redirect("web:project", project_id=only.pk)
    found = (
        mine.filter(Q(name__icontains=find) | Q(organization__name__icontains=find))
        if find
        else mine
    )
    projects = list(found[:PROJECTS_SHOWN])
    context = {
        "projects": projects,
        "total": total,
        "find": find,
        "found": found.count() if find else total,
        "shown": PROJECTS_SHOWN,
    }
    return render(request, "web/operator/home.html", context)


@login_required
def switch(request: HttpRequest) -> HttpResponse:
    """The project switcher's target (a GET form, so it works without JavaScript)."""
    try:
        project_id = uuid.UUID(request.GET.get("project", ""))
    except ValueError:
        raise Http404("No such project.") from None
    if not member_projects(request.user).filter(pk=project_id).exists():
        raise Http404("No such project.")
    return redirect("web:project", project_id=project_id)
