"""The add use case, for every entry point (the REST API and the MCP tool): a request queued
for extraction (`infer=true`), or its messages stored verbatim as memories, joined to the
scope's stored conversation (`infer=false`).

An entry point parses its input into an AddInput, calls prepare_add before it opens its
transaction (embedding may be an HTTP call), then do_add inside its tenant transaction, and
renders the AddOutcome.

May import memory.actions.common, .events and ._shared, memory.models, tenants and Django.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from memory.actions._shared import _as_actor, _history, schedule_entity_linking
from memory.actions.common import Actor, Vector, embed_texts, hold_scope, hold_user
from memory.actions.events import do_queue_add
from memory.models import SCOPE_FIELDS, Memory, MemoryHistory, content_hash, structured_attributes
from memory.text.language import detect
from tenants.db import project_context
from tenants.models import Project


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    name: str = ""


def embed_messages(messages: Sequence[Message]) -> dict[str, Vector]:
    """The vectors do_add_messages needs for `messages` (the system messages are not stored),
    for an entry point to embed before it opens its transaction, within one request's
    embedding budget (ENGRAM_MAX_EMBED_TOKENS; over it, EmbeddingBudgetError)."""
    return embed_texts(
        (m.content for m in messages if m.role != "system"),
        max_tokens=settings.ENGRAM_MAX_EMBED_TOKENS,
    )


@dataclass(frozen=True)
class AddInput:
    """One add request, as its entry point parsed it (memory.api.serializers.AddSerializer)."""

    scope: dict[str, str | None]
    messages: Sequence[Message]
    infer: bool
    # infer=true: what the worker receives (the queued event's payload, JSON only).
    payload: dict[str, Any] = field(default_factory=dict)
    # infer=false: what the stored memories carry.
    metadata: dict[str, Any] | None = None
    created_at: datetime | None = None
    expiration_date: date | None = None
    immutable: bool = False
    # infer=false: the messages' vectors (prepare_add).
    vectors: Mapping[str, Vector] | None = None


@dataclass
class AddOutcome:
    event_id: uuid.UUID
    # True: queued for extraction (the event is PENDING, no memory yet).
    queued: bool = False
    # (memory, "ADD") for new memories, (memory, "NONE") for exact duplicates already stored.
    results: list[tuple[Memory, str]] = field(default_factory=list)


def prepare_add(add: AddInput) -> AddInput:
    """`add` ready for do_add, outside any transaction: infer=false embeds its messages here
    (within the request's budget, see embed_messages); a queued add embeds nothing now."""
    if add.infer or add.vectors is not None:
        return add
    return replace(add, vectors=embed_messages(add.messages))


def do_add(project: Project, add: AddInput, *, actor: Actor | str) -> AddOutcome:
    """Answer an add request: queue it for extraction (infer=true), or store its messages
    verbatim (infer=false). Inside the caller's transaction it takes no savepoint of its own:
    a failed add ends the request."""
    if add.infer:
        return AddOutcome(event_id=do_queue_add(project, add.payload).id, queued=True)
    return do_add_messages(
        project,
        messages=add.messages,
        scope=add.scope,
        actor=actor,
        metadata=add.metadata,
        created_at=add.created_at,
        expiration_date=add.expiration_date,
        immutable=add.immutable,
        vectors=add.vectors,
    )


def do_add_messages(
    project: Project,
    *,
    messages: Sequence[Message],
    scope: dict[str, str | None],
    actor: Actor | str,
    metadata: dict[str, Any] | None = None,
    created_at: datetime | None = None,
    expiration_date: date | None = None,
    immutable: bool = False,
    vectors: Mapping[str, Vector] | None = None,
) -> AddOutcome:
    """Store each non-system message verbatim as a memory (`infer=false`).

    A message whose exact text is already an active memory of the same scope is not stored
    again; the existing memory is returned with the event NONE. The messages join the scope's
    stored conversation (see _join_conversation), so an application adding turn by turn gets
    the same keyword context and conversation grouping as one adding a session at once.
    """
    who = _as_actor(actor)
    outcome = AddOutcome(event_id=uuid.uuid4())
    turns = [(pos, m) for pos, m in enumerate(messages) if m.role != "system"]
    known = embed_texts((m.content for _, m in turns), vectors)
    moment = created_at or timezone.now()
    with project_context(project.pk, savepoint=False):
        hold_user(project.pk, scope.get("user_id"))
        hold_scope(project.pk, scope)
        existing = _existing_by_hash(project, scope, [content_hash(m.content) for _, m in turns])
        new: list[Memory] = []
        for index, (position, message) in enumerate(turns):
            digest = content_hash(message.content)
            if digest in existing:
                outcome.results.append((existing[digest], "NONE"))
                continue
            memory = Memory(
                project=project,
                text=message.content,
                language=detect(message.content),
                hash=digest,
                embedding=known[message.content],
                context_before=turns[index - 1][1].content if index > 0 else "",
                context_after=turns[index + 1][1].content if index + 1 < len(turns) else "",
                metadata=metadata or {},
                role=message.role,
                actor_id=message.name,
                created_at=moment,
                updated_at=moment,
                expiration_date=expiration_date,
                structured_attributes=structured_attributes(moment),
                immutable=immutable,
                source_event_id=outcome.event_id,
                source_positions=[position],
                **scope,
            )
            existing[digest] = memory
            new.append(memory)
            outcome.results.append((memory, "ADD"))
        _join_conversation(project, scope, new, moment, outcome.event_id)
        Memory.objects.bulk_create(new)
        MemoryHistory.objects.bulk_create(
            _history(
                m,
                MemoryHistory.Event.ADD,
                old=None,
                actor=who,
                event_id=outcome.event_id,
                input=[{"role": m.role, "content": m.text}],
            )
            for m in new
        )
        schedule_entity_linking(project.pk, [m.pk for m in new])
    return outcome


def _join_conversation(
    project: Project,
    scope: dict[str, str | None],
    new: list[Memory],
    moment: datetime,
    event_id: uuid.UUID,
) -> None:
    """Place the new messages (stored at `moment`, in this order) in the scope's conversation.

    The stored messages just before and just after them in time (same exact scope, raw
    messages only, within ENGRAM_CONVERSATION_GAP_SECONDS; messages with the same timestamp are
    ordered by when they were stored) become their keyword context, and they theirs: the first
    new message's context_before is the one before, which gets the first new text as its
    context_after (a late arrival between two stored messages replaces each one's context on
    its side); the last new message and the one after, likewise, if that one is in the same
    conversation. The new messages take the conversation of the one before (else of the one
    after, else a new one: this request's id).
    Two indexed lookups and at most two one-row updates, on the request path.
    """
    if not new:
        return
    gap = timedelta(seconds=min(settings.ENGRAM_CONVERSATION_GAP_SECONDS, 366 * 24 * 3600))
    conversation = event_id
    if gap:
        same = {f: scope.get(f) for f in SCOPE_FIELDS}
        stored = (
            Memory.objects.for_project(project)
            .active()
            .exclude(role="")
            .filter(**{f"{f}__isnull": True for f, v in same.items() if v is None})
            .filter(**{f: v for f, v in same.items() if v is not None})
            .only("id", "text", "conversation_id", "source_event_id")
        )
        before = (
            stored.filter(created_at__lte=moment, created_at__gte=_shifted(moment, -gap))
            .order_by("-created_at", "-seq")
            .first()
        )
        after = (
            stored.filter(created_at__gt=moment, created_at__lte=_shifted(moment, gap))
            .order_by("created_at", "seq")
            .first()
        )
        neighbour = before or after
        if neighbour is not None:
            conversation = _conversation_of(neighbour) or event_id
        # A message's words are context only within its conversation (which is what redaction
        # and retention purges clean up): one after a gap from `before` is left alone.
        if before is not None:
            new[0].context_before = new[0].context_before or before.text
            Memory.objects.filter(pk=before.pk).update(context_after=new[0].text)
        if after is not None and _conversation_of(after) == conversation:
            new[-1].context_after = new[-1].context_after or after.text
            Memory.objects.filter(pk=after.pk).update(context_before=new[-1].text)
    for memory in new:
        memory.conversation_id = conversation


def _shifted(moment: datetime, delta: timedelta) -> datetime:
    """moment + delta, held at the ends of years 1-9999: a message may be stored at the last
    second a `timestamp` can name (9999-12-31T23:59:59Z), and the gap after it would overflow."""
    try:
        return moment + delta
    except OverflowError:
        if delta > timedelta(0):
            return datetime.max.replace(tzinfo=UTC)
        return datetime.min.replace(tzinfo=UTC)


def _conversation_of(memory: Memory) -> uuid.UUID | None:
    """A stored message's conversation; rows stored before conversations spanned requests
    (memory 0018) have none but their request's."""
    return memory.conversation_id or memory.source_event_id


def _existing_by_hash(
    project: Project, scope: dict[str, str | None], hashes: list[str]
) -> dict[str, Memory]:
    same_scope = {f: scope.get(f) for f in SCOPE_FIELDS}
    rows = (
        Memory.objects.for_project(project)
        .active()
        .filter(
            hash__in=hashes, **{f"{f}__isnull": True for f, v in same_scope.items() if v is None}
        )
        .filter(**{f: v for f, v in same_scope.items() if v is not None})
    )
    return {m.hash: m for m in rows}
