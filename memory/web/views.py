"""Login, logout and the project list of the operator dashboard."""

from __future__ import annotations

import uuid

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.decorators import method_decorator

from config.logins import limit_failed_logins
from memory.web.common import member_projects


# The admin's limit on failed logins, with the same count per client address.
@method_decorator(limit_failed_logins, name="dispatch")
class LoginView(auth_views.LoginView):
    template_name = "web/operator/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    next_page = "web:login"


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The projects this person may see; with one only, go straight to it."""
    projects = list(member_projects(request.user))
    if len(projects) == 1:
        return redirect("web:project", project_id=projects[0].pk)
    return render(request, "web/operator/home.html", {"projects": projects})


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
