"""A project's scopes, a scope's memories (hybrid search, filters) and one memory's page.

Reads go through memory.queries (search through the same use case as the API,
memory.search); every change through memory.actions with the staff member as actor.
Each view runs in its project's tenant context (memory.web.common.operator_page); the edit,
delete and restore endpoints answer 403 to readers and redirect back with a message (PRG).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils import timezone
from django.views.decorators.http import require_POST

from config.exceptions import RefusedError, ServiceUnavailableError
from config.inputs import UnsafeInputError, check_json
from memory import actions, graph, queries
from memory import search as searching
from memory.models import (
    SCOPE_FIELDS,
    SCOPE_MAX_LENGTH,
    Memory,
    MemoryEvent,
    MemoryHistory,
    metadata_error,
)
from memory.queries import profiles as profile_queries
from memory.text.query import Query
from memory.web.common import Dashboard, operator_page
from memory.web.operations import USAGE_DAYS, usage_since
from memory.web.versions import versions
from tenants.db import project_context

PAGE_SIZE = 25
SEARCH_RESULTS = 50
SCOPES_SHOWN = 25  # per kind on the project page: the top ids by count, narrowed by a filter
TOP_SPENDERS = 5  # users on the project page, the most tokens of the last USAGE_DAYS first
QUERY_MAX_LENGTH = 4000  # as the API's search query
CONTAINS_MAX_LENGTH = 200
STATES = {
    "active": Memory.State.ACTIVE,
    "superseded": Memory.State.SUPERSEDED,
    "deleted": Memory.State.DELETED,
    "all": None,
}
KIND_LABELS = {"user": "Users", "agent": "Agents", "app": "Apps", "run": "Runs"}


# -- forms ---------------------------------------------------------------------------------

DATE = forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")


def _scope_field(label: str) -> forms.CharField:
    return forms.CharField(required=False, max_length=SCOPE_MAX_LENGTH, label=label)


class MemoryFilterForm(forms.Form):
    """The memory list's GET parameters; every one optional, each checked here."""

    q = forms.CharField(
        required=False,
        max_length=QUERY_MAX_LENGTH,
        label="Search (by meaning and words)",
        widget=forms.TextInput(attrs={"type": "search"}),
    )
    contains = forms.CharField(
        required=False,
        max_length=CONTAINS_MAX_LENGTH,
        label="Text contains (as typed, any case; not a relevance search)",
        widget=forms.TextInput(attrs={"type": "search"}),
    )
    user_id = _scope_field("User")
    agent_id = _scope_field("Agent")
    app_id = _scope_field("App")
    run_id = _scope_field("Run")
    category = forms.CharField(required=False, max_length=100, label="Category")
    date_from = forms.DateField(required=False, label="Created from", widget=DATE)
    date_to = forms.DateField(required=False, label="Created to", widget=DATE)
    state = forms.ChoiceField(
        required=False, label="State", choices=[(name, name.title()) for name in STATES]
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("date_from"), data.get("date_to")
        if start and end and start > end:
            self.add_error("date_to", "must not be before the start date.")
        return data

    def scope(self) -> dict[str, str]:
        return {f: self.cleaned_data[f] for f in SCOPE_FIELDS if self.cleaned_data.get(f)}

    def in_use(self) -> int:
        """How many filters narrow the list beyond its user (the page's subject): on a phone
        the filters stay folded when none does."""
        given = {k: v for k, v in self.data.items() if k in self.fields and k != "user_id" and v}
        return sum(1 for k, v in given.items() if not (k == "state" and v == "active"))

    def memories(self, project_id: uuid.UUID) -> Any:
        data = self.cleaned_data
        return queries.browse_memories(
            project_id,
            scope=self.scope(),
            state=STATES[data.get("state") or "active"],
            categories=[data["category"]] if data.get("category") else (),
            created_from=_moment(data.get("date_from"), time.min),
            created_to=_moment(data.get("date_to"), time.max),
            contains=data.get("contains") or "",
        )


def _moment(day: date | None, at: time) -> datetime | None:
    """The start or end of a day, in the current time zone (no date arithmetic to overflow)."""
    if day is None:
        return None
    return timezone.make_aware(datetime.combine(day, at))


class MemoryEditForm(forms.Form):
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), strip=False, label="Text")
    metadata = forms.JSONField(
        required=False, label="Metadata (a JSON object)", widget=forms.Textarea(attrs={"rows": 4})
    )
    expiration_date = forms.DateField(required=False, label="Expiration date", widget=DATE)

    def clean_text(self) -> str:
        text: str = self.cleaned_data["text"]
        if not text.strip():
            raise forms.ValidationError("must not be only whitespace.")
        if len(text) > settings.ENGRAM_MAX_TEXT_CHARS:
            raise forms.ValidationError(
                f"is {len(text)} characters; the limit is {settings.ENGRAM_MAX_TEXT_CHARS}."
            )
        return text

    def clean_metadata(self) -> dict[str, Any]:
        value = self.cleaned_data.get("metadata")
        if value is None:
            return {}
        if (problem := metadata_error(value)) is not None:
            raise forms.ValidationError(problem)
        value = dict(value)
        try:
            check_json(value, "metadata")  # NUL characters, depth, size: what jsonb refuses
        except UnsafeInputError as error:
            raise forms.ValidationError(str(error)) from None
        if len(json.dumps(value, ensure_ascii=False)) > settings.ENGRAM_MAX_TEXT_CHARS:
            raise forms.ValidationError("is too long.")
        return value

    @classmethod
    def of(cls, memory: Memory) -> MemoryEditForm:
        return cls(
            initial={
                "text": memory.text,
                "metadata": memory.metadata,
                "expiration_date": memory.expiration_date,
            }
        )


# -- pages ---------------------------------------------------------------------------------


@operator_page()
def project(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """The project's users, agents, apps and runs, with their active memories: the top ids by
    count of each kind, narrowed by the filter box; and the users who used the most tokens in
    the last 30 days (the top spenders)."""
    contains = request.GET.get("find", "")[:SCOPE_MAX_LENGTH]
    counts = queries.scope_counts(dash.project.pk, contains=contains, limit=SCOPES_SHOWN)
    kinds = [
        {"kind": kind, "label": KIND_LABELS[kind], "field": field, "counts": counts[kind]}
        for kind, field in queries.ENTITY_TYPES.items()
    ]
    spenders = queries.usage_per_scope(
        dash.project.pk, "user", since=usage_since(), limit=TOP_SPENDERS
    )
    context = {
        "section": "scopes",
        "kinds": kinds,
        "find": contains,
        "shown": SCOPES_SHOWN,
        "spenders": spenders,
        "usage_days": USAGE_DAYS,
    }
    return render(request, "web/operator/project.html", context)


@operator_page(tenant=False)  # the query is embedded before the transaction opens
def memory_list(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """A scope's memories: newest first, 25 a page; with `q`, the search's best 50 at the API's
    score and default threshold (the cut shown), and with `nearest`, the best memory below the
    cut too; `contains` keeps the memories whose text contains it (a plain filter)."""
    form = MemoryFilterForm(request.GET)
    context: dict[str, Any] = {
        "section": "memories",
        "form": form,
        "page": None,
        "hits": None,
        "threshold": searching.DEFAULT_THRESHOLD,
        "results": SEARCH_RESULTS,
    }
    valid = form.is_valid()
    text = form.cleaned_data["q"] if valid else ""
    found = form.memories(dash.project.pk) if valid else None
    nearest = request.GET.get("nearest") == "1"
    # The page again, once, after following an embedding switch (memory.search).
    return searching.following_a_switch(
        lambda: _memory_page(
            request, dash, form=form, context=context, text=text, found=found, nearest=nearest
        )
    )


def _memory_page(
    request: HttpRequest,
    dash: Dashboard,
    *,
    form: MemoryFilterForm,
    context: dict[str, Any],
    text: str,
    found: Any,
    nearest: bool,
) -> HttpResponse:
    query: Query | None = None
    if text and found is not None:
        try:
            query = searching.prepare(dash.project.pk, found, text)
        except ServiceUnavailableError as error:  # a hosted embedder that failed
            form.add_error("q", f"Search is unavailable: {error}")
    with project_context(dash.project.pk):
        if found is not None:
            if query is not None:
                context.update(_search(dash, found, query, nearest=nearest))
            elif not text:
                context["page"] = queries.StablePaginator(found, PAGE_SIZE).get_page(
                    request.GET.get("page")
                )
            context["scope"] = form.scope()
            # One user's page: their profile too, if there is such a user (one with memories).
            if set(context["scope"]) == {"user_id"}:
                user_id = context["scope"]["user_id"]
                profile = profile_queries.profile_card(dash.project.pk, user_id)
                if profile is not None and queries.user_memories(dash.project.pk, user_id).exists():
                    context["profile"] = profile
        return render(request, "web/operator/memories.html", context)


def _search(dash: Dashboard, found: Any, query: Query, *, nearest: bool) -> dict[str, Any]:
    """The search's context: the hits at the API's default threshold and the best score of any
    memory (`best`: None in an empty scope); with `nearest`, the same search at threshold 0,
    the best memory below the cut as `nearest` (one search either way)."""
    threshold = searching.DEFAULT_THRESHOLD
    result = searching.search(
        dash.project.pk, found, query, top_k=SEARCH_RESULTS, threshold=0 if nearest else threshold
    )
    hits = [hit for hit in result.hits if hit.score.score >= threshold]
    below = [hit for hit in result.hits if hit.score.score < threshold]
    return {"hits": hits, "best": result.best, "nearest": below[0] if nearest and below else None}


@operator_page()
def memory_detail(request: HttpRequest, dash: Dashboard, memory_id: uuid.UUID) -> HttpResponse:
    memory = _memory(dash, memory_id)
    return _detail(request, dash, memory, MemoryEditForm.of(memory))


def _detail(
    request: HttpRequest, dash: Dashboard, memory: Memory, form: MemoryEditForm, status: int = 200
) -> HttpResponse:
    event = (
        queries.event(dash.project.pk, memory.source_event_id) if memory.source_event_id else None
    )
    history = queries.history(dash.project.pk, memory.id) or []
    context = {
        "section": "memories",
        "memory": memory,
        "form": form,
        "history": history,
        "facts": _facts(dash, memory, history),
        "versions": versions(dash.project.pk, memory),
        "event": event,
        "messages_of_event": _messages(event, memory) if event else [],
        "usage": _usage(event) if event else {},
        "metadata_json": json.dumps(memory.metadata, indent=2, ensure_ascii=False),
    }
    return render(request, "web/operator/memory.html", context, status=status)


@dataclass(frozen=True)
class Fact:
    """A graph relation as a memory's page shows it, and how the memory stands to it."""

    relation: graph.Relation
    state: str  # "backed", "held by others" (an earlier wording backed it), "ended"
    why: str


def _facts(dash: Dashboard, memory: Memory, history: Sequence[MemoryHistory]) -> list[Fact]:
    """The graph facts the memory backs, and those it backed: ended by an edit of its text
    (brought back by making that text current again), by its delete or by a contradiction."""
    if memory.state == Memory.State.REDACTED:
        return []
    edits = [h.pk for h in history if h.event == MemoryHistory.Event.UPDATE]
    mid = str(memory.pk)
    found = []
    for relation in graph.memory_relations(dash.project.pk, memory.pk, edits):
        if mid in relation.memory_ids:
            if relation.valid:
                found.append(Fact(relation, "backed", "this memory backs it"))
            elif relation.invalidated_by == graph.RETRACTION:
                why = "no active memory backs it (restoring this memory brings it back)"
                found.append(Fact(relation, "ended", why))
            else:
                found.append(Fact(relation, "ended", "a later fact contradicted it"))
        elif relation.valid:
            why = "an earlier text of this memory backed it; other memories still do"
            found.append(Fact(relation, "held by others", why))
        else:
            why = (
                "only an earlier text of this memory backed it: making that text current "
                "again (Versions) brings it back"
            )
            found.append(Fact(relation, "ended", why))
    return found


def _messages(event: MemoryEvent, memory: Memory) -> list[dict[str, Any]]:
    """The source request's messages, those the memory came from marked."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    found = []
    for position, message in enumerate(payload.get("messages") or []):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if not isinstance(content, str):
            kind = content.get("type", "part") if isinstance(content, dict) else "part"
            content = f"[{kind}]"
        found.append(
            {
                "role": message.get("role", ""),
                "content": content,
                "source": position in memory.source_positions,
            }
        )
    return found


def _usage(event: MemoryEvent) -> dict[str, Any]:
    usage = event.usage if isinstance(event.usage, dict) else {}
    return {k: usage.get(k) for k in ("calls", "input_tokens", "output_tokens")}


def _memory(dash: Dashboard, memory_id: uuid.UUID) -> Memory:
    memory = queries.memory_in_any_state(dash.project.pk, memory_id)
    if memory is None:
        raise Http404("No such memory.")
    return memory


def _back(memory: Memory) -> HttpResponse:
    return redirect("web:memory", project_id=memory.project_id, memory_id=memory.pk)


@operator_page(write=True, tenant=False)  # the action embeds a new text before its transaction
@require_POST
def memory_edit(request: HttpRequest, dash: Dashboard, memory_id: uuid.UUID) -> HttpResponse:
    """Change the text (re-embedded), metadata or expiration date of an active memory."""
    with project_context(dash.project.pk):
        memory = _memory(dash, memory_id)
    if memory.state != Memory.State.ACTIVE:
        messages.error(request, f"Only an active memory can be edited; this one is {memory.state}.")
        return _back(memory)
    form = MemoryEditForm(request.POST)
    if not form.is_valid():
        with project_context(dash.project.pk):
            return _detail(request, dash, memory, form, status=400)
    text, metadata = form.cleaned_data["text"], form.cleaned_data["metadata"]
    expires = form.cleaned_data["expiration_date"]
    changes: dict[str, Any] = {
        "text": text if text != memory.text else None,
        "metadata": metadata if metadata != memory.metadata else None,
        "expiration_date": expires if expires != memory.expiration_date else actions.UNSET,
    }
    if changes == {"text": None, "metadata": None, "expiration_date": actions.UNSET}:
        messages.info(request, "Nothing changed.")
        return _back(memory)
    try:
        edit = actions.do_update_memory(memory, actor=dash.actor, **changes)
    except (RefusedError, ServiceUnavailableError) as error:  # immutable; embedder down
        messages.error(request, str(error))
        return _back(memory)
    done = "Memory updated." + (" Re-embedded." if changes["text"] else "")
    _graph_message(request, done, edit)
    return _back(memory)


@operator_page(write=True)
@require_POST
def memory_delete(request: HttpRequest, dash: Dashboard, memory_id: uuid.UUID) -> HttpResponse:
    """The soft delete: hidden from the API and search, kept with its history, restorable."""
    memory = _memory(dash, memory_id)
    if memory.state in (Memory.State.DELETED, Memory.State.REDACTED):
        messages.info(request, f"This memory is {memory.state} already.")
        return _back(memory)
    try:
        actions.do_delete_memory(memory, actor=dash.actor)
    except RefusedError as error:
        messages.error(request, str(error))
        return _back(memory)
    messages.success(request, "Memory deleted. You can restore it below.")
    return _back(memory)


@operator_page(write=True)
@require_POST
def memory_restore(request: HttpRequest, dash: Dashboard, memory_id: uuid.UUID) -> HttpResponse:
    memory = _memory(dash, memory_id)
    try:
        actions.do_restore_memory(memory, actor=dash.actor)
    except RefusedError as error:  # not deleted
        messages.error(request, str(error))
        return _back(memory)
    messages.success(request, "Memory restored.")
    return _back(memory)


@operator_page(write=True, tenant=False)  # the action embeds the text before its transaction
@require_POST
def memory_restore_version(
    request: HttpRequest, dash: Dashboard, memory_id: uuid.UUID, history_id: uuid.UUID
) -> HttpResponse:
    """Give an active memory the text of one of its earlier versions: a new version (re-embedded,
    a history row naming the staff member), the versions between kept."""
    with project_context(dash.project.pk):
        memory = _memory(dash, memory_id)
        wanted = next(
            (v for v in versions(dash.project.pk, memory) if v.history_id == history_id), None
        )
    if wanted is None:
        raise Http404("No such version of this memory.")
    if memory.state != Memory.State.ACTIVE:
        messages.error(
            request, f"Only an active memory can be changed; this one is {memory.state}."
        )
        return _back(memory)
    if wanted.text == memory.text:
        messages.info(request, "The memory already says this.")
        return _back(memory)
    try:
        edit = actions.do_update_memory(memory, actor=dash.actor, text=wanted.text)
    except (RefusedError, ServiceUnavailableError) as error:  # immutable; embedder down
        messages.error(request, str(error))
        return _back(memory)
    _graph_message(request, "Earlier version restored as a new version. Re-embedded.", edit)
    return _back(memory)


def _graph_message(request: HttpRequest, done: str, edit: actions.MemoryEdit) -> None:
    """The edit's message, with the graph facts it ended (a warning) or brought back."""
    note = edit.graph_note()
    (messages.warning if edit.ended else messages.success)(request, f"{done} {note}".strip())


urlpatterns = [
    path("", project, name="project"),
    path("memories/", memory_list, name="memories"),
    path("memories/<uuid:memory_id>/", memory_detail, name="memory"),
    path("memories/<uuid:memory_id>/edit/", memory_edit, name="memory_edit"),
    path("memories/<uuid:memory_id>/delete/", memory_delete, name="memory_delete"),
    path("memories/<uuid:memory_id>/restore/", memory_restore, name="memory_restore"),
    path(
        "memories/<uuid:memory_id>/versions/<uuid:history_id>/restore/",
        memory_restore_version,
        name="memory_restore_version",
    ),
]
