"""What runs behind a project's memories, for its operators: add requests (events), the
project's API keys, and a scope's graph as a picture (what they cost: memory.web.usage).

Reads go through memory.queries (the graph: graph_edges and graph_relations, as the API reads
it); API keys are written through tenants.actions. Readers see everything here and change
nothing (operator_page answers 403 to their POSTs and to the revoke confirmation).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import datetime, time, timedelta
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.core.paginator import Page, Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from memory import actions, graph, queries
from memory.models import NOTHING_EXTRACTED, SCOPE_MAX_LENGTH, MemoryEvent
from memory.retrieval.filters import FilterError
from memory.web import graph_picture
from memory.web.common import Dashboard, operator_page
from tenants.actions import do_create_project_key, do_revoke_api_key
from tenants.models import ApiKey

EVENTS_PER_PAGE = 25
USAGE_DAYS = 30
RELATIONS_PER_PAGE = 50
# The picture reads at most one API page of relations (graph.MAX_LIMIT) and draws the
# graph_picture.MAX_NODES entities with most relations among them.
PICTURE_RELATIONS = graph.MAX_LIMIT
SCOPE_CHOICES = 25
ENTITY_MAX_LENGTH = 1000  # a focused entity's name, as the API's traverse takes it


# -- events and model usage ----------------------------------------------------------------


REVERTED = "REVERTED"


class EventFilterForm(forms.Form):
    # REVERTED: a SUCCEEDED request whose changes were undone since (the list's SUCCEEDED
    # leaves those out).
    status = forms.ChoiceField(
        choices=[("", "Any"), *MemoryEvent.Status.choices, (REVERTED, "Reverted")], required=False
    )
    user_id = forms.CharField(max_length=SCOPE_MAX_LENGTH, required=False, label="User id")
    agent_id = forms.CharField(max_length=SCOPE_MAX_LENGTH, required=False, label="Agent id")
    warning = forms.BooleanField(required=False, label="Only with a warning")


def usage_since(days: int = USAGE_DAYS) -> datetime:
    """The start of the first of the last `days` days (today included), in the current zone."""
    first = timezone.localdate() - timedelta(days=days - 1)
    return timezone.make_aware(datetime.combine(first, time.min))


@operator_page()
def events(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """The add requests, 25 a page, each marked when it kept nothing, and how many of the last
    30 days' extracted nothing from first-person messages (a model that may not be working).
    What they cost is on the Usage page (memory.web.usage)."""
    form = EventFilterForm(request.GET)
    wanted = form.cleaned_data if form.is_valid() else {}
    user_id = wanted.get("user_id") or None
    status = wanted.get("status") or None
    found = queries.events(
        dash.project.pk,
        MemoryEvent.Status.SUCCEEDED if status == REVERTED else status,
        user_id=user_id,
        agent_id=wanted.get("agent_id") or None,
    ).defer("payload", "results", "graph")  # the list shows none of them
    if status == REVERTED:
        found = found.filter(reverted_at__isnull=False)
    elif status == MemoryEvent.Status.SUCCEEDED:
        found = found.filter(reverted_at__isnull=True)
    if wanted.get("warning"):
        found = found.exclude(warning="")
    page = queries.StablePaginator(found, EVENTS_PER_PAGE).get_page(request.GET.get("page"))
    warned = (
        queries.events(dash.project.pk)
        .filter(created_at__gte=usage_since(), warning=NOTHING_EXTRACTED)
        .count()
    )
    context = {
        "section": "events",
        "form": form,
        "page": page,
        "warned": warned,
        "nothing_extracted": NOTHING_EXTRACTED,
        "usage_days": USAGE_DAYS,
        # What extracts new requests as this server is configured (the worker reads the same
        # settings): a model (its provider and name), or the offline extractor.
        "extractor": settings.ENGRAM_EXTRACTOR,
        "model": settings.ENGRAM_LLM_MODEL if settings.ENGRAM_EXTRACTOR != "offline" else "",
    }
    return render(request, "web/operator/events.html", context)


def _message_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's messages as sent: text as it came, other parts (images, documents) as
    their JSON."""
    rows = []
    for message in payload.get("messages") or []:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, indent=2)
        rows.append({"role": message.get("role"), "name": message.get("name"), "text": text})
    return rows


def _memory_id(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


@operator_page()
def event(request: HttpRequest, dash: Dashboard, event_id: uuid.UUID) -> HttpResponse:
    found = queries.event(dash.project.pk, event_id)
    if found is None:
        raise Http404("No such event.")
    payload = found.payload if isinstance(found.payload, dict) else {}
    results = [
        {**result, "memory_id": _memory_id(result.get("id"))}
        for result in found.results or []
        if isinstance(result, dict)
    ]
    options = {k: v for k, v in payload.items() if k not in ("messages", "scope") and v}
    context = {
        "section": "events",
        "event": found,
        "messages_sent": _message_rows(payload),
        "options": json.dumps(options, indent=2, ensure_ascii=False, sort_keys=True),
        "results": results,
        "graph": found.graph or {},
    }
    return render(request, "web/operator/event.html", context)


@operator_page(write=True)
def event_revert(request: HttpRequest, dash: Dashboard, event_id: uuid.UUID) -> HttpResponse:
    """GET: what the add request did, and a confirmation form; POST: revert it as a whole
    (actions.do_revert_event), or say which later change prevents it."""
    if request.method != "POST":
        found = queries.event(dash.project.pk, event_id)
        if found is None:
            raise Http404("No such event.")
        context = {"section": "events", "event": found, "results": found.results or []}
        return render(request, "web/operator/event_revert.html", context)
    try:
        reversal = actions.do_revert_event(dash.project.pk, event_id, actor=dash.actor)
    except MemoryEvent.DoesNotExist:
        raise Http404("No such event.") from None
    except actions.RevertConflictError as refused:
        messages.error(request, refused.detail)
        return redirect("web:event", project_id=dash.project.pk, event_id=event_id)
    counts = Counter(r["event"] for r in reversal["results"])
    messages.success(
        request,
        f"Reverted: {counts['DELETE']} memor{'y' if counts['DELETE'] == 1 else 'ies'} deleted, "
        f"{counts['RESTORE']} restored.",
    )
    return redirect("web:event", project_id=dash.project.pk, event_id=event_id)


# -- API keys --------------------------------------------------------------------------------


class KeyForm(forms.Form):
    name = forms.CharField(max_length=200, label="Name", help_text="What uses it, e.g. 'chat app'")


# The keys created in this session and not shown yet: [{"project", "name", "raw"}]. The create
# POST puts a key here and redirects (post/redirect/get); the keys page of its project takes it
# out and shows it, so a reload neither creates another key nor shows the secret again.
NEW_KEYS = "web.new_keys"


def _take_new_keys(request: HttpRequest, dash: Dashboard) -> list[dict[str, str]]:
    """This project's keys waiting to be shown, removed from the session (shown once)."""
    pending: list[dict[str, str]] = request.session.get(NEW_KEYS) or []
    project = str(dash.project.pk)
    mine = [key for key in pending if key.get("project") == project]
    if mine:
        rest = [key for key in pending if key.get("project") != project]
        if rest:
            request.session[NEW_KEYS] = rest
        else:
            del request.session[NEW_KEYS]
    return mine


def _keys_page(
    request: HttpRequest, dash: Dashboard, form: KeyForm, status: int = 200, **extra: Any
) -> HttpResponse:
    # ApiKey is not under row-level security (a key is found before its project): the filter
    # by project is the wall here.
    keys = ApiKey.objects.filter(project=dash.project).select_related("created_by")
    context = {
        "section": "keys",
        "keys": keys.order_by("revoked_at", "-created_at"),
        "form": form,
        **extra,
    }
    return render(request, "web/operator/keys.html", context, status=status)


@operator_page()
def keys(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """The project's keys; after a create, the new key's secret, on this response only."""
    new_keys = _take_new_keys(request, dash)
    response = _keys_page(request, dash, KeyForm(), new_keys=new_keys)
    if new_keys:
        response["Cache-Control"] = "no-store"
    return response


@operator_page(write=True)
@require_POST
def key_create(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """Create a key and send the browser to the keys page (303), which shows its secret once:
    the secret waits in the session for that one GET (only the key's hash is stored)."""
    form = KeyForm(request.POST)
    if not form.is_valid():
        return _keys_page(request, dash, form, status=400)
    new = do_create_project_key(
        dash.project, name=form.cleaned_data["name"], created_by=cast(User, request.user)
    )
    pending = request.session.get(NEW_KEYS) or []
    shown = {"project": str(dash.project.pk), "name": new.key.name, "raw": new.raw}
    request.session[NEW_KEYS] = [*pending, shown]
    response = redirect("web:keys", project_id=dash.project.pk)
    response.status_code = 303  # See Other: the browser GETs the keys page
    return response


@operator_page(write=True)
def key_revoke(request: HttpRequest, dash: Dashboard, key_id: uuid.UUID) -> HttpResponse:
    """GET: a confirmation form; POST: revoke (the key stops authenticating at once)."""
    key = ApiKey.objects.filter(project=dash.project, pk=key_id).first()
    if key is None:
        raise Http404("No such key.")
    if request.method != "POST":
        return render(request, "web/operator/key_revoke.html", {"section": "keys", "key": key})
    if key.is_revoked:
        messages.info(request, format_html("The key <bdi>{}</bdi> was already revoked.", key.name))
    else:
        do_revoke_api_key(key)
        messages.success(
            request,
            format_html("The key <bdi>{}</bdi> is revoked: it no longer authenticates.", key.name),
        )
    return redirect("web:keys", project_id=dash.project.pk)


# -- the graph -------------------------------------------------------------------------------


class ScopeForm(forms.Form):
    user_id = forms.CharField(max_length=SCOPE_MAX_LENGTH, required=False, label="User id")
    agent_id = forms.CharField(max_length=SCOPE_MAX_LENGTH, required=False, label="Agent id")
    ended = forms.BooleanField(required=False, label="Include ended relations")
    # The entity the page is focused on (its node's link sets it); kept by the form's Show.
    entity = forms.CharField(max_length=ENTITY_MAX_LENGTH, required=False, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not (data.get("user_id") or data.get("agent_id")):
            raise forms.ValidationError("Give a user id or an agent id.")
        return data


def _moment(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def _relation_rows(
    project_id: uuid.UUID, relations: list[graph.Relation], names: dict[str, str]
) -> list[dict[str, Any]]:
    """The table's rows: each relation with its ends' display names, since / until, and the
    memories behind it (text and state; their texts read in one query)."""
    ids = {
        rel.id: [m for m in map(_memory_id, rel.memory_ids) if m is not None] for rel in relations
    }
    texts = queries.memory_texts(project_id, [m for found in ids.values() for m in found])
    rows = []
    for rel in relations:
        memories = [
            {"id": m, "text": texts[m][0], "state": texts[m][1]} if m in texts else {"id": m}
            for m in ids[rel.id]
        ]
        rows.append(
            {
                "relation": rel,
                "source": names.get(rel.source) or rel.source,
                "destination": names.get(rel.destination) or rel.destination,
                "since": _moment(rel.created_at),
                "until": _moment(rel.invalidated_at),
                "memories": memories,
            }
        )
    return rows


def _display_names(project_id: uuid.UUID, relations: list[graph.Relation]) -> dict[str, str]:
    """Each normalised name of these relations' ends with its display name (one query). The
    page reads one exact scope, where a name is one entity."""
    by_id = queries.entity_display_names(
        project_id, [i for rel in relations for i in (rel.source_id, rel.destination_id)]
    )
    names: dict[str, str] = {}
    for rel in relations:
        for name, vertex in ((rel.source, rel.source_id), (rel.destination, rel.destination_id)):
            if vertex in by_id:
                names.setdefault(name, by_id[vertex])
    return names


@operator_page()
def graph_view(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """A scope's entities and relations (valid ones; ended ones too when asked): a picture
    (SVG) and a table. A scope is the user id and/or agent id given, the other ids not tested,
    as the API's GET /v1/graph/ reads. With `entity`, the page is focused on that entity: its
    relations both ways (as the API's traverse, depth 1) and the memories behind them."""
    form = ScopeForm(request.GET) if request.GET else ScopeForm()
    context: dict[str, Any] = {"section": "graph", "form": form}
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        scope = {k: data[k] for k in ("user_id", "agent_id") if data[k]}
        focus = graph.normalise_name(data["entity"] or "")
        try:
            edges = queries.graph_edges(dash.project.pk, scope, include_invalid=data["ended"])
        except FilterError as exc:
            form.add_error(None, str(exc))
        else:
            relations: Any  # the paginator's sequence: a list, or counted in the database
            if focus:
                found = queries.graph_traversal(
                    dash.project.pk, edges, focus, depth=1, limit=graph.MAX_LIMIT
                )
                names = {n.name: n.display_name for n in found.nodes}
                relations = drawn = found.relations
            else:
                # GraphRelations counts and slices in the database, as a paginator wants (the
                # stubs know only sequences and querysets).
                relations = queries.graph_relations(dash.project.pk, edges)
                drawn = relations[0:PICTURE_RELATIONS]
            paginator: Paginator[graph.Relation] = Paginator(relations, RELATIONS_PER_PAGE)
            page: Page[graph.Relation] = paginator.get_page(request.GET.get("page"))
            rows = list(page.object_list)
            if not focus:
                names = _display_names(dash.project.pk, [*drawn, *rows])
            query = {**scope, **({"ended": "on"} if data["ended"] else {})}
            context |= {
                "scope": scope,
                "focus": focus,
                "focus_name": names.get(focus) or data["entity"],
                "ended": data["ended"],
                "page": page,
                "rows": _relation_rows(dash.project.pk, rows, names),
                "picture": graph_picture.picture(drawn, names=names, focus=focus),
                "drawn_relations": len(drawn),
                # The scope's query string (what the nodes' links and the pages keep).
                "scope_query": urlencode(query),
            }
    if "scope" not in context:
        context["users"] = queries.scope_counts(dash.project.pk, limit=SCOPE_CHOICES)["user"]
    return render(request, "web/operator/graph.html", context)


urlpatterns = [
    path("events/", events, name="events"),
    path("events/<uuid:event_id>/", event, name="event"),
    path("events/<uuid:event_id>/revert/", event_revert, name="event_revert"),
    path("keys/", keys, name="keys"),
    path("keys/create/", key_create, name="key_create"),
    path("keys/<uuid:key_id>/revoke/", key_revoke, name="key_revoke"),
    path("graph/", graph_view, name="graph"),
]
