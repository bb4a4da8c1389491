"""The operator's share of the end user's powers (issue #50): erase one memory for good, erase a
user, the list of the project's erasure requests, and opening the user's own page; each after a
confirmation page. The same actions as the API and the end user's own page (the redaction of
POST /v1/memories/{id}/redact/; the user delete of DELETE /v2/entities/user/{id}/: the memories
hidden at once, the erasure queued), recorded under the operator's name — on the user's page
too: the link an operator opens carries their username (tenants.links, DashboardLink.by).
Owners and admins only (operator_page(write=True)).
"""

from __future__ import annotations

import uuid

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse

from memory import actions, queries
from memory.models import SCOPE_MAX_LENGTH, Memory
from memory.web.common import Dashboard, operator_page
from tenants import links
from tenants.models import ApiKey

ERASURES_SHOWN = 100


class UserForm(forms.Form):
    user_id = forms.CharField(max_length=SCOPE_MAX_LENGTH, strip=False)


@operator_page(write=True)
def memory_erase(request: HttpRequest, dash: Dashboard, memory_id: uuid.UUID) -> HttpResponse:
    """GET: a confirmation; POST: the memory's text erased for good from every store."""
    memory = queries.memory_in_any_state(dash.project.pk, memory_id)
    if memory is None:
        raise Http404("No such memory.")
    if memory.state == Memory.State.REDACTED:
        messages.info(request, "This memory is already erased.")
        return redirect("web:memory", project_id=dash.project.pk, memory_id=memory.pk)
    if request.method != "POST":
        context = {"section": "memories", "memory": memory}
        return render(request, "web/operator/memory_erase.html", context)
    actions.do_redact_memory(memory, actor=dash.actor, reason="erased by an operator")
    messages.success(request, "The memory is erased for good: its text is gone from every store.")
    return redirect("web:memory", project_id=dash.project.pk, memory_id=memory.pk)


@operator_page(write=True)
def user_erase(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """GET ?user_id=: a confirmation; POST: every memory of the user hidden at once and the
    erasure queued (the worker erases them, their history, graph and requests for good)."""
    form = UserForm(request.POST if request.method == "POST" else request.GET)
    if not form.is_valid():
        raise Http404("No such user.")
    user_id = form.cleaned_data["user_id"]
    count = queries.user_memories(dash.project.pk, user_id).count()
    if request.method != "POST":
        context = {"section": "memories", "user_id": user_id, "count": count}
        return render(request, "web/operator/user_erase.html", context)
    hidden, _ = actions.do_hide_and_request_erasure(dash.project.pk, user_id, actor=dash.actor)
    messages.success(
        request,
        f"The user's {hidden} memor{'y is' if hidden == 1 else 'ies are'} hidden; the erasure "
        "is queued and listed below until it is done.",
    )
    return redirect("web:erasures", project_id=dash.project.pk)


# How long the page an operator opens stays valid: long enough to look, short enough to forget.
STAFF_LINK_SECONDS = 3600


@operator_page(write=True)
def user_page(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """GET ?user_id=: a confirmation naming what the page allows; POST: a link to the user's own
    page for an hour, signed under the project's newest active key (revoking it ends the
    link), carrying the operator's name, and the browser sent to it."""
    form = UserForm(request.POST if request.method == "POST" else request.GET)
    if not form.is_valid():
        raise Http404("No such user.")
    user_id = form.cleaned_data["user_id"]
    key = ApiKey.objects.active().filter(project=dash.project).order_by("-created_at").first()
    if request.method != "POST" or key is None:
        context = {"section": "memories", "user_id": user_id, "key": key,
                   "minutes": STAFF_LINK_SECONDS // 60}  # fmt: skip
        return render(request, "web/operator/user_page.html", context)
    token, _ = links.mint(key, user_id, STAFF_LINK_SECONDS, by=request.user.get_username())
    path = reverse("web:enduser_home", kwargs={"token": token})
    return redirect(settings.ENGRAM_PUBLIC_URL + path if settings.ENGRAM_PUBLIC_URL else path)


@operator_page()
def erasures(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """The project's erasure requests, newest first: whom (while pending), who asked, the
    status and what was erased."""
    rows = list(queries.erasures(dash.project.pk)[:ERASURES_SHOWN])
    context = {"section": "memories", "erasures": rows, "shown": ERASURES_SHOWN}
    return render(request, "web/operator/erasures.html", context)


urlpatterns = [
    path("memories/<uuid:memory_id>/erase/", memory_erase, name="memory_erase"),
    path("users/erase/", user_erase, name="user_erase"),
    path("users/page/", user_page, name="user_page"),
    path("erasures/", erasures, name="erasures"),
]
