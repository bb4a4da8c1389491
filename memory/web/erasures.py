"""The operator's erasures (issue #50): erase one memory for good, erase a user, and the list of
the project's erasure requests; each erasure after a confirmation page. The same actions as the
API and the end user's own page (the redaction of POST /v1/memories/{id}/redact/; the user delete
of DELETE /v2/entities/user/{id}/: the memories hidden at once, the erasure queued), recorded
under the operator's name. Owners and admins only (operator_page(write=True)).
"""

from __future__ import annotations

import uuid

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path

from memory import actions, queries
from memory.models import SCOPE_MAX_LENGTH, Memory
from memory.web.common import Dashboard, operator_page

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
    path("erasures/", erasures, name="erasures"),
]
