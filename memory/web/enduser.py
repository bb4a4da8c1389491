"""The end user's own dashboard, opened by a signed, expiring link (tenants.links).

No login: the token in the path is the credential. Every page resolves it first (a plain 403
page when it is expired, tampered with or revoked), then reads and writes only the memories
whose user_id is the link's, inside the link's project context (row-level security too). The
user can list and search them, see where each came from, correct one (history actor
"enduser:<id>"), delete one, download everything as JSON and request erasure of everything.

The token is kept out of logs: every log line is redacted as it is written (config.redaction),
and the page also rewrites the request's path (which gunicorn's access log and Django's request
logging print) to /me/<redacted>/… before anything logs it, and runs the CSRF check itself
after that (a refused form is logged with the rewritten path). The pages are never cached, and
send the Referer to this server only: `no-referrer` would make browsers send `Origin: null`
with the forms, which the CSRF check refuses.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, re_path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from config.exceptions import RefusedError
from config.inputs import text_problem
from config.redaction import redact_page_path
from memory import actions, graph, queries
from memory import search as searching
from memory.actions import Actor
from memory.models import SCOPE_FIELDS, Memory, MemoryHistory
from memory.parts import describe
from memory.queries import profiles as profile_queries
from memory.text.embeddings import embed_one
from memory.web.versions import END_USER_ACTORS, end_user_cause, versions
from tenants import links
from tenants.db import project_context
from tenants.models import Project

PAGE_SIZE = 20
# A search ranks the user's memories and pages through the best ones.
SEARCH_RESULTS = 100
MAX_QUERY_CHARS = 500
DELETED_SHOWN = 20  # the latest deleted memories listed, restorable, on the user's page
# The user's graph relations in their download, at most (oldest first).
RELATIONS_EXPORTED = 10_000


@dataclass(frozen=True)
class EndUser:
    """The holder of a valid link (`me` in the templates)."""

    link: links.DashboardLink
    token: str

    @property
    def user_id(self) -> str:
        return self.link.user_id

    @property
    def project_id(self) -> uuid.UUID:
        return self.link.project_id

    @property
    def actor(self) -> Actor:
        """The user; or the staff member who opened the page from the operator dashboard, so
        that what they change is recorded under their own name."""
        if self.link.by:
            return Actor("user", self.link.by)
        return Actor.end_user(self.link.user_id)

    @contextmanager
    def context(self) -> Iterator[None]:
        with project_context(self.link.project_id):
            yield


View = Callable[..., HttpResponse]


def _hide_token(request: HttpRequest) -> None:
    # WSGIRequest.META is the server's environ: gunicorn logs its PATH_INFO after the response.
    request.META["PATH_INFO"] = redact_page_path(str(request.META.get("PATH_INFO", "")))
    request.path = redact_page_path(request.path)


def _secure(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "same-origin"
    response["X-Robots-Tag"] = "noindex, nofollow"
    return response


def enduser_page(view: Callable[..., HttpResponse]) -> View:
    """Wrap a view taking (request, me, **kwargs) whose URL starts with the token."""

    @wraps(view)
    def checked(request: HttpRequest, token: str, **kwargs: Any) -> HttpResponse:
        try:
            me = EndUser(links.resolve(token), token)
        except links.LinkError as refused:
            return render(
                request, "web/enduser/refused.html", {"reason": refused.reason}, status=403
            )
        try:
            return view(request, me, **kwargs)
        except Http404:
            return render(request, "web/enduser/not_found.html", {"me": me}, status=404)

    protected = csrf_protect(checked)

    @csrf_exempt  # checked by `protected`, once the path no longer shows the token
    @wraps(view)
    def page(request: HttpRequest, token: str, **kwargs: Any) -> HttpResponse:
        _hide_token(request)
        return _secure(protected(request, token, **kwargs))

    return page


def _memory_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise Http404("No such memory.") from None


def _own_memory(me: EndUser, memory_id: str) -> Memory:
    """The user's active memory, inside the caller's context; 404 for anyone else's."""
    found = queries.user_memory(me.project_id, me.user_id, _memory_id(memory_id))
    if found is None:
        raise Http404("No such memory.")
    return found


def _project(me: EndUser) -> Project:
    return Project.objects.select_related("organization").get(pk=me.project_id)


@enduser_page
@require_GET
def home(request: HttpRequest, me: EndUser) -> HttpResponse:
    """The user's memories, newest first, or the best matches of a search; paginated."""
    query = request.GET.get("q", "").strip()
    error = ""
    if len(query) > MAX_QUERY_CHARS:
        error, query = f"Search for at most {MAX_QUERY_CHARS} characters.", ""
    # The page again, once, after following an embedding switch (memory.search).
    return searching.following_a_switch(lambda: _home_page(request, me, query, error))


def _home_page(request: HttpRequest, me: EndUser, query: str, error: str) -> HttpResponse:
    mine = queries.user_memories(me.project_id, me.user_id).light()
    # Before the transaction: may be HTTP.
    analysed = searching.prepare(me.project_id, mine, query) if query else None
    with me.context():
        if analysed is not None:
            hits = searching.search(me.project_id, mine, analysed, top_k=SEARCH_RESULTS).hits
            found: Any = [hit.memory for hit in hits]
        else:
            found = queries.user_memories_listed(me.project_id, me.user_id)
        page = queries.StablePaginator(found, PAGE_SIZE).get_page(request.GET.get("page"))
        deleted = [
            {"memory": m, "by": deleted_by(m), "mine": _deleted_by_them(me, m)}
            for m in queries.user_deleted_memories(me.project_id, me.user_id)[:DELETED_SHOWN]
        ]
        project = _project(me)
        context = {
            "me": me,
            "project": project,
            "page": page,
            "deleted": deleted,
            "kept_days": _kept_days(project),
            "profile": profile_queries.profile_card(me.project_id, me.user_id),
            "q": query,
            "error": error,
            "section": "memories",
        }
        return render(request, "web/enduser/home.html", context, status=400 if error else 200)


class CorrectionForm(forms.Form):
    text = forms.CharField(
        label="Corrected text",
        widget=forms.Textarea(attrs={"rows": 4}),
        max_length=settings.ENGRAM_MAX_TEXT_CHARS,
    )

    def clean_text(self) -> str:
        text: str = self.cleaned_data["text"]
        problem = text_problem(text)
        if problem:
            raise forms.ValidationError(f"The text {problem}.")
        return text


def _sources(me: EndUser, memory: Memory) -> list[dict[str, Any]]:
    return [
        {
            "role": str(message.get("role") or ""),
            "name": str(message.get("name") or ""),
            "text": content if isinstance(content, str) else describe(content),
            "used": message["used"],
        }
        for message in queries.source_messages(me.project_id, memory)
        for content in [message.get("content")]
    ]


def _changes(rows: list[MemoryHistory]) -> list[dict[str, Any]]:
    return [
        {
            "event": row.event,
            "old_text": row.old_memory,
            "new_text": row.new_memory,
            "by": end_user_cause(row, {}),
            "at": row.created_at,
        }
        for row in rows
    ]


def _memory_page(
    request: HttpRequest, me: EndUser, memory: Memory, form: CorrectionForm, status: int = 200
) -> HttpResponse:
    context = {
        "me": me,
        "memory": memory,
        "form": form,
        "sources": _sources(me, memory),
        "versions": versions(me.project_id, memory, described=end_user_cause),
    }
    return render(request, "web/enduser/memory.html", context, status=status)


@enduser_page
@require_GET
def memory_detail(request: HttpRequest, me: EndUser, memory_id: str) -> HttpResponse:
    """One memory: where it came from, its changes, the forms to correct or delete it."""
    with me.context():
        memory = _own_memory(me, memory_id)
        return _memory_page(request, me, memory, CorrectionForm(initial={"text": memory.text}))


@enduser_page
@require_POST
def correct(request: HttpRequest, me: EndUser, memory_id: str) -> HttpResponse:
    form = CorrectionForm(request.POST)
    with me.context():
        memory = _own_memory(me, memory_id)
        if not form.is_valid():
            return _memory_page(request, me, memory, form, status=400)
    text = form.cleaned_data["text"]
    vector = embed_one(text) if text != memory.text else None  # outside the transaction
    try:
        with me.context():
            memory = _own_memory(me, memory_id)  # still yours, still active
            edit = actions.do_update_memory(memory, actor=me.actor, text=text, vector=vector)
    except RefusedError as refused:  # an immutable memory
        form.add_error("text", str(refused))
        with me.context():
            return _memory_page(request, me, memory, form, status=400)
    messages.success(request, f"Your correction is saved. {edit.graph_note()}".strip())
    return redirect("web:enduser_memory", token=me.token, memory_id=memory.id)


def _kept_memory(me: EndUser, memory_id: str) -> Memory:
    """The user's memory, active or deleted (restorable), inside the caller's context; 404 for
    anyone else's."""
    found = queries.user_memory_kept(me.project_id, me.user_id, _memory_id(memory_id))
    if found is None:
        raise Http404("No such memory.")
    return found


def _kept_days(project: Project) -> int:
    """How many days a deleted memory is kept, restorable, before it is erased for good (the
    project's retention, else the server's; 0: until the user or the application erases it)."""
    days = project.deleted_retention_days
    return settings.ENGRAM_DELETED_RETENTION_DAYS if days is None else days


@enduser_page
@require_http_methods(["GET", "POST"])
def delete(request: HttpRequest, me: EndUser, memory_id: str) -> HttpResponse:
    """GET: what deleting means, and the choice to erase for good at once instead; POST: the
    soft delete (hidden at once, restorable until the retention period ends)."""
    with me.context():
        memory = _own_memory(me, memory_id)
        if request.method != "POST":
            context = {"me": me, "memory": memory, "days": _kept_days(_project(me))}
            return render(request, "web/enduser/delete.html", context)
        actions.do_delete_memory(memory, actor=me.actor)
    messages.success(request, "The memory is deleted. You can undo this under “Recently deleted”.")
    return redirect("web:enduser_home", token=me.token)


@enduser_page
@require_POST
def restore(request: HttpRequest, me: EndUser, memory_id: str) -> HttpResponse:
    """Undo the user's own delete while the memory is still kept; a delete made by the
    application, support staff or an undone add request is theirs to undo, not the user's."""
    with me.context():
        memory = _kept_memory(me, memory_id)
        theirs = (
            queries.user_deleted_memories(me.project_id, me.user_id).filter(pk=memory.pk).first()
        )
        if memory.state == Memory.State.ACTIVE:
            messages.info(request, "This memory is not deleted.")
        elif theirs is None or not _deleted_by_them(me, theirs):
            who = deleted_by(theirs) if theirs is not None else "someone else"
            messages.error(
                request, f"This memory was deleted by {who}: only a delete you made is undone here."
            )
        else:
            actions.do_restore_memory(memory, actor=me.actor)
            messages.success(request, "The memory is back.")
    return redirect("web:enduser_home", token=me.token)


def _deleted_by_them(me: EndUser, memory: Memory) -> bool:
    """Whether the holder of the link deleted it (the user on their page: their `enduser:`
    actor; a staff member who opened it: theirs)."""
    return str(getattr(memory, "deleted_by", "") or "") == str(me.actor)


def deleted_by(memory: Memory) -> str:
    """Who deleted it, in the user's words (versions.END_USER_ACTORS)."""
    actor = str(getattr(memory, "deleted_by", "") or "")
    if actor.startswith("extractor:"):
        return "automatic extraction"
    return END_USER_ACTORS.get(actor.partition(":")[0], "someone else")


@enduser_page
@require_http_methods(["GET", "POST"])
def erase_memory(request: HttpRequest, me: EndUser, memory_id: str) -> HttpResponse:
    """GET: a confirmation; POST: erase one memory for good at once, active or deleted (the
    redaction of the API's POST /v1/memories/{id}/redact/)."""
    with me.context():
        memory = _kept_memory(me, memory_id)
        if request.method != "POST":
            return render(request, "web/enduser/erase_memory.html", {"me": me, "memory": memory})
        actions.do_redact_memory(memory, actor=me.actor, reason="erased by the user")
    messages.success(request, "The memory is erased for good.")
    return redirect("web:enduser_home", token=me.token)


def _export_entry(
    memory: Memory, history: list[MemoryHistory], sources: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "id": str(memory.id),
        "text": memory.text,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
        "expiration_date": memory.expiration_date.isoformat() if memory.expiration_date else None,
        "categories": list(memory.categories),
        "metadata": memory.metadata,
        "user_id": memory.user_id,
        "agent_id": memory.agent_id,
        "app_id": memory.app_id,
        "run_id": memory.run_id,
        "source_event_id": str(memory.source_event_id) if memory.source_event_id else None,
        # The messages it was taken from (`used`) and the rest of their request.
        "source_messages": sources,
        "history": [{**change, "at": change["at"].isoformat()} for change in _changes(history)],
    }


def _relation_entry(relation: graph.Relation) -> dict[str, Any]:
    return {
        "source": relation.source,
        "relationship": relation.relationship,
        "destination": relation.destination,
        "valid": relation.valid,
        "since": relation.created_at,
        "until": relation.invalidated_at,
        "memory_ids": relation.memory_ids,
        **{field: relation.scope.get(field) for field in SCOPE_FIELDS},
    }


@enduser_page
@require_GET
def download(request: HttpRequest, me: EndUser) -> HttpResponse:
    """Everything remembered about the user, as a JSON file (the right of access): each
    memory with where it came from and its changes, and the relations the graph holds."""
    with me.context():
        mine = list(queries.user_memories(me.project_id, me.user_id).light())
        history = queries.histories(me.project_id, [m.id for m in mine])
        sources = queries.sources_of(me.project_id, mine, history)
        relations = queries.user_relations(me.project_id, me.user_id, RELATIONS_EXPORTED)
        found = profile_queries.user_profile(me.project_id, me.user_id)
    # The profile built from these memories (memory.extraction.profiles), if the user has one.
    profile = None
    if found is not None:
        updated = found.updated_at.isoformat() if found.updated_at else None
        profile = {"status": found.status, "fields": found.profile, "updated_at": updated}
    body = {
        "user_id": me.user_id,
        "exported_at": timezone.now().isoformat(),
        "count": len(mine),
        "memories": [_export_entry(m, history[m.id], sources[m.id]) for m in mine],
        "relations": [_relation_entry(r) for r in relations],
        "profile": profile,
    }
    response = HttpResponse(
        json.dumps(body, ensure_ascii=False, indent=2), content_type="application/json"
    )
    response["Content-Disposition"] = 'attachment; filename="my-memories.json"'
    return response


@enduser_page
@require_http_methods(["GET", "POST"])
def erase(request: HttpRequest, me: EndUser) -> HttpResponse:
    """Erasure of everything: a confirmation page, then the same path as the API's user delete
    (the memories hidden at once, the erasure queued for a worker)."""
    with me.context():
        if request.method == "POST":
            actions.do_hide_and_request_erasure(me.project_id, me.user_id, actor=me.actor)
            return redirect("web:enduser_erased", token=me.token)
        count = queries.user_memories(me.project_id, me.user_id).count()
        return render(
            request, "web/enduser/erase.html", {"me": me, "count": count, "section": "erase"}
        )


@enduser_page
@require_GET
def erased(request: HttpRequest, me: EndUser) -> HttpResponse:
    return render(request, "web/enduser/erased.html", {"me": me})


@enduser_page
def unknown(request: HttpRequest, me: EndUser, rest: str = "") -> HttpResponse:
    """Any other path under a token: 404, with the token kept out of the logs all the same."""
    raise Http404("No such page.")


urlpatterns = [
    path("<str:token>/", home, name="enduser_home"),
    path("<str:token>/m/<str:memory_id>/", memory_detail, name="enduser_memory"),
    path("<str:token>/m/<str:memory_id>/correct/", correct, name="enduser_correct"),
    path("<str:token>/m/<str:memory_id>/delete/", delete, name="enduser_delete"),
    path("<str:token>/m/<str:memory_id>/restore/", restore, name="enduser_restore"),
    path("<str:token>/m/<str:memory_id>/erase/", erase_memory, name="enduser_erase_memory"),
    path("<str:token>/download/", download, name="enduser_download"),
    path("<str:token>/erase/", erase, name="enduser_erase"),
    path("<str:token>/erase/done/", erased, name="enduser_erased"),
    re_path(r"^(?P<token>[^/]+)/(?P<rest>.*)$", unknown, name="enduser_unknown"),
]
