"""The only writers of memory state.

Every create, in-place update, supersede, delete and restore of a memory goes through a `do_*`
function here, whoever asks: the API, the extraction pipeline, the dashboards, the admin, a
management command. Each one:

- runs in one transaction inside the memory's tenant context (tenants.db.project_context; it
  nests as a savepoint when the caller already opened one, e.g. the pipeline applying several
  decisions at once);
- writes its history rows in that transaction, naming the Actor;
- enforces the rules once: an immutable memory is never changed, and is deleted only on a
  person's or an API key's explicit request, never by the model's decision.

Text is embedded before any transaction opens: callers pass the vectors they computed, or let
the action embed (then call it outside a transaction: a hosted embedder is an HTTP call). Hard
erasure (GDPR) is `do_erase_user`, which calls the one database-side erasure path.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from audit.models import ErasureRequest
from config.exceptions import RefusedError
from memory import graph
from memory.models import (
    SCOPE_FIELDS,
    SCOPE_MAX_LENGTH,
    Feedback,
    IdempotentRequest,
    Memory,
    MemoryEvent,
    MemoryExport,
    MemoryHistory,
    MemoryQuerySet,
    content_hash,
    structured_attributes,
)
from memory.text.embeddings import embed
from tenants.db import project_context
from tenants.models import Project

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from tenants.models import ApiKey

UNSET: Any = object()  # "not given", as opposed to an explicit null
Vector = Sequence[float]


@dataclass(frozen=True)
class Actor:
    """Who changes memory; recorded as "kind:id" in every history row."""

    kind: str  # api | user | enduser | extractor | command
    id: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"

    @classmethod
    def api_key(cls, key: ApiKey) -> Actor:
        return cls("api", key.prefix)

    @classmethod
    def staff(cls, user: AbstractBaseUser) -> Actor:
        return cls("user", user.get_username())

    @classmethod
    def end_user(cls, user_id: str) -> Actor:
        return cls("enduser", user_id)

    @classmethod
    def extraction(cls, event_id: uuid.UUID) -> Actor:
        return cls("extractor", str(event_id))

    @classmethod
    def command(cls, name: str) -> Actor:
        return cls("command", name)


class ImmutableMemoryError(RefusedError):
    """The change would alter an immutable memory; nothing was written."""


class NotRestorableError(RefusedError):
    """Only a deleted memory can be restored."""


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    name: str = ""


@dataclass
class AddOutcome:
    event_id: uuid.UUID
    # (memory, "ADD") for new memories, (memory, "NONE") for exact duplicates already stored.
    results: list[tuple[Memory, str]] = field(default_factory=list)


def _history(
    memory: Memory, event: str, *, old: str | None, actor: Actor, **extra: Any
) -> MemoryHistory:
    return MemoryHistory(
        project_id=memory.project_id,
        memory_id=memory.id,
        event=event,
        old_memory=old,
        new_memory=memory.text if event != MemoryHistory.Event.DELETE else None,
        actor=str(actor),
        event_id=extra.pop("event_id", None) or _event_of(actor),
        metadata=memory.metadata,
        categories=list(memory.categories),
        **{f: getattr(memory, f) for f in SCOPE_FIELDS},
        **extra,
    )


def _event_of(actor: Actor) -> uuid.UUID | None:
    """The add request behind an extraction's change (history links it)."""
    return uuid.UUID(actor.id) if actor.kind == "extractor" else None


def _as_actor(actor: Actor | str) -> Actor:
    if isinstance(actor, Actor):
        return actor
    kind, _, ident = actor.partition(":")
    return Actor(kind, ident)


def check_mutable(memory: Memory, actor: Actor, change: str) -> None:
    """The immutability rule, for every caller: no update ever; no delete by the model. A
    redacted memory is a skeleton: nothing of it changes any more."""
    if memory.state == Memory.State.REDACTED:
        raise ImmutableMemoryError(f"Memory {memory.id} is redacted and cannot be {change}d.")
    if memory.immutable and (change == "update" or actor.kind == "extractor"):
        raise ImmutableMemoryError(f"Memory {memory.id} is immutable and cannot be {change}d.")


def embed_texts(
    texts: Iterable[str],
    given: Mapping[str, Vector] | None = None,
    *,
    max_tokens: int | None = None,
) -> dict[str, Vector]:
    """Vectors for `texts`: the ones given, the rest embedded now (once per distinct text).

    Entry points call it before opening their transaction and pass the result to the action,
    with their request's embedding budget (ENGRAM_MAX_EMBED_TOKENS): over it, nothing is
    embedded and EmbeddingBudgetError (a RefusedError, 400 in the API) says so.
    """
    known = dict(given or {})
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        known.update(zip(missing, embed(missing, max_tokens), strict=True))
    return known


def hold_user(project_id: uuid.UUID, user_id: str | None, *, exclusive: bool = False) -> None:
    """Take the user's lock until the caller's transaction ends: shared by writers of the user's
    memories (adds, extraction applying its decisions), exclusive for their erasure. So an
    erasure waits for a write in progress and then erases what it wrote, and a write that
    waited for an erasure finds its event gone (extraction) or writes after it (a new add)."""
    if not user_id:
        return
    lock = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {lock}(hashtextextended(%s, 0))",  # lock: one of the two names above
            [json.dumps(["engram.user", str(project_id), user_id])],
        )


def hold_scope(project_id: uuid.UUID, scope: Mapping[str, str | None]) -> None:
    """Take the lock of one exact scope until the caller's transaction ends: the writers that
    store a text only if the scope has no active memory of it (raw adds, extraction applying
    its decisions) hold it from their check to their commit, so each checks after the other
    committed. Under READ COMMITTED each statement sees what was committed before it started,
    so a check made after the lock is granted sees the other writer's memory; a check alone,
    without the lock, runs while the other writer has not committed yet, and both store it.
    Take it after hold_user (every holder takes them in that order)."""
    key = [str(project_id), *(scope.get(f) for f in SCOPE_FIELDS)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [json.dumps(["engram.scope", *key])],
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
    with project_context(project.pk):
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


@dataclass(frozen=True)
class NewMemory:
    """One memory to create from extracted text (the pipeline's ADD and UPDATE)."""

    text: str
    vector: Vector
    scope: dict[str, Any]
    metadata: dict[str, Any]
    categories: list[str]
    expiration_date: date | str | None = None
    immutable: bool = False
    source_event_id: uuid.UUID | None = None
    source_positions: Sequence[int] = ()
    # When what it says was observed (the add request's `timestamp`, else when the request
    # came); now when None.
    created_at: datetime | None = None


def do_create_memory(project_id: uuid.UUID, new: NewMemory, *, actor: Actor) -> Memory:
    """Create one memory from extracted text, with its ADD history row."""
    moment = new.created_at or timezone.now()
    with project_context(project_id):
        memory = Memory.objects.create(
            project_id=project_id,
            text=new.text,
            hash=content_hash(new.text),
            embedding=new.vector,
            metadata=new.metadata,
            expiration_date=new.expiration_date,
            immutable=new.immutable,
            categories=new.categories,
            created_at=moment,
            updated_at=timezone.now(),
            structured_attributes=structured_attributes(moment),
            source_event_id=new.source_event_id,
            source_positions=list(new.source_positions),
            **new.scope,
        )
        _history(memory, MemoryHistory.Event.ADD, old=None, actor=actor).save()
        schedule_entity_linking(project_id, [memory.pk])
    return memory


def do_supersede_memory(memory: Memory, new: NewMemory, *, actor: Actor) -> Memory:
    """Replace a memory by a new one (the model's UPDATE): the old one is kept, `superseded`,
    pointing to its replacement, so the lineage stays readable. Returns the new memory."""
    check_mutable(memory, actor, "update")
    with project_context(memory.project_id):
        replacement = do_create_memory(memory.project_id, new, actor=actor)
        memory.state, memory.replaced_by, memory.updated_at = (
            Memory.State.SUPERSEDED, replacement, timezone.now()
        )  # fmt: skip
        memory.save(update_fields=["state", "replaced_by", "updated_at"])
        history = _history(memory, MemoryHistory.Event.UPDATE, old=memory.text, actor=actor)
        history.new_memory = replacement.text
        history.save()
        # The old memory no longer backs its relations (the replacement asserts its own).
        graph.retract_memories(memory.project_id, [memory.pk])
    return replacement


def do_update_memory(
    memory: Memory,
    *,
    actor: Actor | str,
    text: str | None = None,
    metadata: dict[str, Any] | None = None,
    expiration_date: date | None = UNSET,
    created_at: datetime | None = None,
    vector: Vector | None = None,
) -> Memory:
    """Change a memory in place (re-embedding new text) and record the change."""
    who = _as_actor(actor)
    check_mutable(memory, who, "update")
    new_text = text is not None and text != memory.text
    if new_text and vector is None:
        vector = embed([str(text)])[0]
    with project_context(memory.project_id):
        old_text = memory.text
        if new_text:
            memory.text = str(text)
            memory.hash = content_hash(memory.text)
            memory.embedding = vector
        if metadata is not None:
            memory.metadata = metadata
        if expiration_date is not UNSET:
            memory.expiration_date = expiration_date
        if created_at is not None:
            memory.created_at = created_at
            memory.structured_attributes = structured_attributes(created_at)
        memory.updated_at = timezone.now()
        memory.save()
        _history(memory, MemoryHistory.Event.UPDATE, old=old_text, actor=who).save()
        if new_text:
            # The old wording's relations no longer hold: the memory stops backing them (they
            # are invalidated unless another active memory backs them). No re-extraction.
            graph.retract_memories(memory.project_id, [memory.pk], reworded=True)
            schedule_entity_linking(memory.project_id, [memory.pk])
    return memory


def _mark_deleted(project_id: uuid.UUID, memories: Iterable[Memory], actor: Actor) -> int:
    rows = list(memories)
    for memory in rows:
        check_mutable(memory, actor, "delete")
    if not rows:
        return 0
    with project_context(project_id):
        Memory.objects.filter(pk__in=[m.pk for m in rows]).update(
            state=Memory.State.DELETED, updated_at=timezone.now()
        )
        MemoryHistory.objects.bulk_create(
            _history(m, MemoryHistory.Event.DELETE, old=m.text, actor=actor) for m in rows
        )
        # Relations only these memories backed are invalidated (kept, restorable).
        graph.retract_memories(project_id, [m.pk for m in rows])
    return len(rows)


def do_delete_memory(memory: Memory, *, actor: Actor | str, linked: Sequence[Memory] = ()) -> int:
    """Mark a memory deleted (hidden everywhere); hard removal is GDPR erasure's job.

    `linked`: the memories it superseded, transitively (queries.linked_for_update; Mem0's
    delete_linked), deleted with it in the same transaction, each with its history row, so an
    older version cannot resurface once the current one is gone. An immutable memory is deleted
    only when named: one among `linked` refuses the whole delete. Returns how many of `linked`
    were deleted (Mem0's cascade_count).
    """
    for older in linked:
        if older.immutable:
            raise ImmutableMemoryError(
                f"Memory {older.id}, which {memory.id} superseded, is immutable: it is deleted "
                "only when named. Nothing was deleted."
            )
    _mark_deleted(memory.project_id, [memory, *linked], _as_actor(actor))
    return len(linked)


def do_delete_memories(queryset: MemoryQuerySet, *, actor: Actor | str) -> int:
    """Delete every active memory of `queryset` (already scoped to one project)."""
    with transaction.atomic():
        rows = list(queryset.active().light().select_for_update())
        if not rows:
            return 0
        return _mark_deleted(rows[0].project_id, rows, _as_actor(actor))


def do_restore_memory(memory: Memory, *, actor: Actor | str) -> Memory:
    """Make a deleted memory active again (an operator correcting a wrong deletion)."""
    who = _as_actor(actor)
    if memory.state != Memory.State.DELETED:
        raise NotRestorableError(f"Memory {memory.id} is {memory.state}; only a deleted one.")
    with project_context(memory.project_id):
        memory.state, memory.updated_at = Memory.State.ACTIVE, timezone.now()
        memory.save(update_fields=["state", "updated_at"])
        _history(memory, MemoryHistory.Event.RESTORE, old=None, actor=who).save()
        # Relations invalidated only by its retraction are valid again.
        graph.reinstate_memories(memory.project_id, [memory.pk])
    return memory


@dataclass(frozen=True)
class BatchUpdate:
    memory: Memory
    text: str | None
    metadata: dict[str, Any] | None


def do_batch_update(
    updates: Sequence[BatchUpdate],
    *,
    actor: Actor | str,
    vectors: Mapping[str, Vector] | None = None,
) -> int:
    """All or nothing: one transaction for the whole batch, no change if one is immutable."""
    who = _as_actor(actor)
    for update in updates:
        check_mutable(update.memory, who, "update")
    texts = [u.text for u in updates if u.text is not None and u.text != u.memory.text]
    known = embed_texts(texts, vectors)
    if not updates:
        return 0
    now = timezone.now()
    history = []
    with project_context(updates[0].memory.project_id):
        for update in updates:
            memory, old_text = update.memory, update.memory.text
            if update.text is not None and update.text != old_text:
                memory.text, memory.hash = update.text, content_hash(update.text)
                memory.embedding = known[update.text]
            if update.metadata is not None:
                memory.metadata = update.metadata
            memory.updated_at = now
            history.append(_history(memory, MemoryHistory.Event.UPDATE, old=old_text, actor=who))
        Memory.objects.bulk_update(
            [u.memory for u in updates], ["text", "hash", "embedding", "metadata", "updated_at"]
        )
        MemoryHistory.objects.bulk_create(history)
        changed = [h.memory_id for h in history if h.old_memory != h.new_memory]
        # As in do_update_memory: reworded memories stop backing their old relations.
        graph.retract_memories(updates[0].memory.project_id, changed, reworded=True)
        schedule_entity_linking(updates[0].memory.project_id, changed)
    return len(updates)


def do_batch_delete(memories: Sequence[Memory], *, actor: Actor | str) -> int:
    if not memories:
        return 0
    return _mark_deleted(memories[0].project_id, memories, _as_actor(actor))


def do_record_feedback(memory: Memory, *, feedback: str | None, reason: str) -> Feedback:
    with project_context(memory.project_id):
        return Feedback.objects.create(
            project_id=memory.project_id, memory=memory, feedback=feedback, feedback_reason=reason
        )


def do_create_export(
    project: Project, *, schema: dict[str, Any], filters: dict[str, Any], result: list[Any]
) -> MemoryExport:
    with project_context(project.pk):
        return MemoryExport.objects.create(
            project=project, schema=schema, filters=filters, result=result
        )


def do_queue_add(project: Project, payload: dict[str, Any]) -> MemoryEvent:
    """Record an add request for extraction, and send it to the workers once committed."""
    from memory.extraction.tasks import process_event

    with project_context(project.pk):
        event = MemoryEvent.objects.create(project=project, payload=payload, **payload["scope"])
        args = (str(event.id), str(project.pk))
        # A lost send (the database gone right after the commit) is logged, not raised: the
        # event is stored PENDING and the sweeper (sweep_events) sends it again.
        transaction.on_commit(lambda: process_event.send(*args), robust=True)
    return event


_CLAIM_KEY = """
INSERT INTO memory_idempotentrequest AS r (project_id, key, body_hash, status, created_at)
VALUES (%(project)s, %(key)s, %(hash)s, 0, %(now)s)
ON CONFLICT (project_id, key) DO UPDATE
    SET body_hash = EXCLUDED.body_hash, status = 0, response = NULL,
        created_at = EXCLUDED.created_at
    WHERE r.created_at < %(expired_before)s
RETURNING r.id
"""


def do_claim_idempotency_key(
    project_id: uuid.UUID, key: str, body_hash: str, *, expired_before: datetime
) -> bool:
    """Take `key` for the request being answered, in the caller's (the add's) transaction.

    True: the key is new, or its record older than `expired_before` (taken over): answer, then
    do_record_idempotent_response. False: the key is taken; its first answer is committed and
    readable (queries.idempotent_request). One statement on the unique (project, key) index: a
    concurrent request with the same key waits here until the first one's transaction ends,
    then finds its record (or takes the key, if the first one rolled back).
    """
    params: dict[str, Any] = {
        "project": project_id,
        "key": key,
        "hash": body_hash,
        "now": timezone.now(),
        "expired_before": expired_before,
    }
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(_CLAIM_KEY, params)
        return cursor.fetchone() is not None


def do_record_idempotent_response(
    project_id: uuid.UUID, key: str, status: int, response: Any
) -> None:
    """Store the answer to replay for a key taken by do_claim_idempotency_key."""
    with project_context(project_id):
        IdempotentRequest.objects.filter(project_id=project_id, key=key).update(
            status=status, response=response
        )


def do_prune_idempotency_keys(project_id: uuid.UUID, *, expired_before: datetime) -> int:
    """Delete the project's Idempotency-Key records older than `expired_before`."""
    with project_context(project_id):
        deleted, _ = IdempotentRequest.objects.filter(
            project_id=project_id, created_at__lt=expired_before
        ).delete()
    return deleted


@dataclass(frozen=True)
class GraphAssertion:
    """One relation a memory states (extraction's triple, with the memory it became)."""

    source: str
    relationship: str
    destination: str
    memory_id: uuid.UUID
    source_type: str = ""
    destination_type: str = ""


@dataclass
class GraphOutcome:
    added: list[graph.Relation] = field(default_factory=list)  # new or merged edges
    invalidated: list[graph.Relation] = field(default_factory=list)


def do_record_graph(
    project_id: uuid.UUID,
    scope: Mapping[str, str | None],
    *,
    assertions: Sequence[GraphAssertion],
    contradicted: Sequence[int] = (),
    mentions: Mapping[uuid.UUID, Sequence[tuple[str, str]]] | None = None,
    event_id: uuid.UUID | None = None,
) -> GraphOutcome:
    """Write what extraction learned to the scope's graph, in one transaction (a savepoint of
    the pipeline's, so the graph commits with the memories or not at all).

    First the contradicted edges are invalidated (kept, valid=false, never erased); then each
    assertion is merged into the graph (a duplicate valid edge gains the memory id, otherwise
    a new edge), linking its memory to both ends; then each memory is linked to the other
    entities it mentions.
    """
    where = graph.Scope.of(scope)
    outcome = GraphOutcome()
    with project_context(project_id):
        graph.lock_entities(
            project_id,
            where,
            [name for fact in assertions for name in (fact.source, fact.destination)]
            + [name for entities in (mentions or {}).values() for name, _ in entities],
        )
        if contradicted:
            outcome.invalidated = graph.invalidate_relations(project_id, where, ids=contradicted)
        for fact in assertions:
            relation = graph.upsert_relation(
                project_id, fact.source, fact.relationship, fact.destination, where,
                memory_id=fact.memory_id, event_id=event_id,
                source_type=fact.source_type, destination_type=fact.destination_type,
            )  # fmt: skip
            outcome.added.append(relation)
        for memory_id, entities in (mentions or {}).items():
            if entities:
                graph.link_memory(project_id, memory_id, entities)
    return outcome


def schedule_entity_linking(project_id: uuid.UUID, memory_ids: Sequence[uuid.UUID]) -> None:
    """Link these memories to the entities they mention, once this transaction has committed:
    off the request path, in the worker (memory.extraction.tasks.link_entities), so an add is
    not slowed by the graph. Links are only added: text that no longer names an entity keeps
    its old link until the memory is deleted."""
    from memory.extraction.tasks import link_entities

    if not memory_ids:
        return
    args = (str(project_id), [str(m) for m in memory_ids])
    # A lost send (the database gone right after the commit) leaves these memories without
    # their entity links (search works; the entity signal misses them) and is logged.
    transaction.on_commit(lambda: link_entities.send(*args), robust=True)


def schedule_summary_refresh(event: MemoryEvent) -> None:
    """Fold the event's messages into its scope's running summary, once this transaction has
    committed (off the extraction path; memory.extraction.tasks.refresh_summary)."""
    from memory.extraction.tasks import refresh_summary

    args = (str(event.id), str(event.project_id))
    # A lost send skips one refresh: the next one folds this event in (it reads every event
    # completed since the summary's last).
    transaction.on_commit(lambda: refresh_summary.send(*args), robust=True)


# The label of the key that hashes erased ids: HMAC-SHA256 keyed by a key derived from
# SECRET_KEY and this label (django.utils.crypto.salted_hmac). Rotating SECRET_KEY changes
# every future hash, so earlier purge records no longer match the same id.
ERASURE_HASH_LABEL = "engram.erasure.subject.v1"
# The stores engram_erase_user reports on, in the order they are listed.
ERASURE_STORES = (
    "memories", "feedback", "entity_links", "graph_entities", "graph_relations", "history",
    "summaries", "events", "queue_messages", "exports", "idempotency", "access_log",
)  # fmt: skip


def erasure_subject_hash(project_id: uuid.UUID, kind: str, subject_id: str) -> str:
    """The salted hash an erased id is replaced by (64 hex digits), per project and kind."""
    value = f"{project_id}:{kind}:{subject_id}"
    return salted_hmac(ERASURE_HASH_LABEL, value, algorithm="sha256").hexdigest()


def do_erase_user(
    project: Project | uuid.UUID, user_id: str, *, actor: Actor | str, dry_run: bool = False
) -> dict[str, int]:
    """Erase one user of one project from every store, for good (GDPR right to erasure).

    One call of the database function `engram_erase_user` (audit migrations 0008, 0010, 0013), in
    one transaction in the project's tenant context: it deletes the user's memories, their
    feedback, entity links and history, the user's vertices in the project's AGE graph
    (graph_entities: every vertex whose user_id is the user) with their edges and any edge of
    the user (graph_relations), scope summaries, add requests and their queue messages, the
    exports that hold any of it and the answers kept for Idempotency-Key replays that name its
    memories (idempotency); replaces the id by its salted hash in the access log; and
    writes a purge record with the counts. Returns the rows per store; `dry_run` counts only
    and writes nothing. A second run erases nothing and records that.
    """
    if not user_id or len(user_id) > SCOPE_MAX_LENGTH:
        raise ValueError(f"user_id must have 1 to {SCOPE_MAX_LENGTH} characters.")
    project_id = project.pk if isinstance(project, Project) else project
    subject = erasure_subject_hash(project_id, "user", user_id)
    with project_context(project_id), connection.cursor() as cursor:
        hold_user(project_id, user_id, exclusive=True)  # writes in progress finish first
        cursor.execute(
            "SELECT engram_erase_user(%s, %s, %s, %s, %s)",
            [project_id, user_id, subject, str(_as_actor(actor)), dry_run],
        )
        row = cursor.fetchone()
        counts = row[0] if row else {}
        if isinstance(counts, str):  # Django leaves jsonb undecoded outside a JSONField
            counts = json.loads(counts)
        ordered = sorted(
            counts, key=lambda s: ERASURE_STORES.index(s) if s in ERASURE_STORES else 99
        )
        result = {store: int(counts[store]) for store in ordered}
        if not dry_run:
            # Erasures of this user asked through the API and not yet run are done by this one:
            # their clear-text id goes with everything else.
            ErasureRequest.objects.filter(
                project_id=project_id, subject_hash=subject, status=ErasureRequest.Status.PENDING
            ).update(
                status=ErasureRequest.Status.SUCCEEDED, counts=result, subject_id="",
                completed_at=timezone.now(),
            )  # fmt: skip
    return result


# Attempts at an API erasure before it is FAILED (the worker job retries in between).
ERASURE_MAX_ATTEMPTS = 4


def do_request_user_erasure(
    project: Project | uuid.UUID, user_id: str, *, actor: Actor | str
) -> ErasureRequest:
    """Record an erasure of `user_id` and queue it for a worker, once this transaction commits
    (the API's entity delete: the caller hides the memories at once in the same transaction)."""
    from memory.extraction.tasks import erase_user

    if not user_id or len(user_id) > SCOPE_MAX_LENGTH:
        raise ValueError(f"user_id must have 1 to {SCOPE_MAX_LENGTH} characters.")
    project_id = project.pk if isinstance(project, Project) else project
    with project_context(project_id):
        request = ErasureRequest.objects.create(
            project_id=project_id,
            subject_hash=erasure_subject_hash(project_id, "user", user_id),
            subject_id=user_id,
            actor=str(_as_actor(actor)),
        )
        args = (str(request.id), str(project_id))
        # A lost send is logged; the request stays PENDING (the user's memories already hidden)
        # until `purge_user` completes it.
        transaction.on_commit(lambda: erase_user.send(*args), robust=True)
    return request


def do_hide_and_request_erasure(
    project: Project | uuid.UUID, user_id: str, *, actor: Actor | str
) -> tuple[int, ErasureRequest]:
    """The right to erasure as a caller asks it (the API's user delete, the end user's own
    dashboard): in one transaction, hide every active memory of the user at once (the soft
    delete, with history rows) and queue the erasure (do_request_user_erasure). Returns the
    number of memories hidden and the request."""
    project_id = project.pk if isinstance(project, Project) else project
    with project_context(project_id):
        hidden = do_delete_memories(
            Memory.objects.for_project(project_id).filter(user_id=user_id), actor=actor
        )
        return hidden, do_request_user_erasure(project_id, user_id, actor=actor)


def do_run_erasure(project_id: uuid.UUID, request_id: uuid.UUID) -> bool:
    """Carry out a requested erasure; True when the job is done (or was), False to retry.

    The attempt is counted first, in its own transaction. Then, in one transaction, the user is
    erased (do_erase_user: every store, the purge record) and the request marked SUCCEEDED with
    the counts, its clear-text id cleared. A failure is recorded on the request; after
    ERASURE_MAX_ATTEMPTS it is FAILED for good (the id is kept, so an operator can run
    purge_user). Safe to run again: a finished request is left alone.
    """
    with project_context(project_id):
        request = ErasureRequest.objects.select_for_update().filter(pk=request_id).first()
        if request is None or request.status != ErasureRequest.Status.PENDING:
            return True
        request.attempts += 1
        request.save(update_fields=["attempts"])
    try:
        with project_context(project_id):
            request = ErasureRequest.objects.select_for_update().get(pk=request_id)
            counts = do_erase_user(project_id, request.subject_id, actor=request.actor)
            request.status, request.counts, request.subject_id = (
                ErasureRequest.Status.SUCCEEDED, counts, ""
            )  # fmt: skip
            request.error, request.completed_at = "", timezone.now()
            request.save()
    except Exception as exc:
        final = request.attempts >= ERASURE_MAX_ATTEMPTS
        with project_context(project_id):
            ErasureRequest.objects.filter(pk=request_id).update(
                error=f"attempt {request.attempts}: {type(exc).__name__}",
                status=ErasureRequest.Status.FAILED if final else ErasureRequest.Status.PENDING,
                completed_at=timezone.now() if final else None,
            )
        return final
    return True


# -- Redaction and retention (audit migration 0012: engram_erase_memories, engram_purge_events)

# The stores engram_erase_memories reports on, in the order they are listed.
MEMORY_ERASURE_STORES = (
    "memories", "feedback", "entity_links", "graph_entities", "graph_relations", "history",
    "contexts", "summaries", "events", "exports", "idempotency",
)  # fmt: skip


def _erase_memories(
    project_id: uuid.UUID,
    memory_ids: Sequence[uuid.UUID],
    *,
    redact: bool,
    subject: tuple[str, str],
    actor: Actor,
    reason: str = "",
    dry_run: bool = False,
) -> dict[str, int]:
    """One call of engram_erase_memories in the project's tenant context (see the migration)."""
    kind, subject_id = subject
    with project_context(project_id), connection.cursor() as cursor:
        if not dry_run:
            # Valid edges only these memories backed become invalid first, as for a delete.
            graph.retract_memories(project_id, memory_ids)
        cursor.execute(
            "SELECT engram_erase_memories(%s, %s::uuid[], %s, %s, %s, %s, %s, %s)",
            [
                project_id, list(memory_ids), redact, kind,
                erasure_subject_hash(project_id, kind, subject_id), str(actor), reason, dry_run,
            ],
        )  # fmt: skip
        return _counts(cursor.fetchone(), MEMORY_ERASURE_STORES)


def _counts(row: Any, stores: Sequence[str]) -> dict[str, int]:
    counts = row[0] if row else {}
    if isinstance(counts, str):  # Django leaves jsonb undecoded outside a JSONField
        counts = json.loads(counts)
    ordered = sorted(counts, key=lambda s: stores.index(s) if s in stores else len(stores))
    return {store: int(counts[store]) for store in ordered}


def do_redact_memory(
    memory: Memory, *, actor: Actor | str, reason: str = "", dry_run: bool = False
) -> dict[str, int]:
    """Remove a memory's text for good from every store, keeping its skeleton (GDPR).

    A legal removal: allowed for any memory, immutable, superseded or deleted included. The
    memory becomes `redacted` (text "[redacted]", zero vector, no metadata; never listed,
    searched, changed or restored); its history rows keep who and when with the text blanked,
    and a REDACT row (actor, `reason`) is added; the add requests that carried it lose their
    messages' contents and its text in their results; feedback reasons, entity links, graph
    edges only it backed (and entities left without edges or links), the scope's running
    summary and its text in exports go. One purge record (counts, no text). Returns the rows
    per store; a second redaction counts nothing. `dry_run` counts only.
    """
    who = _as_actor(actor)
    with project_context(memory.project_id):
        hold_user(memory.project_id, memory.user_id, exclusive=True)
        return _erase_memories(
            memory.project_id, [memory.pk], redact=True, subject=("memory", str(memory.pk)),
            actor=who, reason=reason, dry_run=dry_run,
        )  # fmt: skip


# Memories erased per call of the database function (one transaction each).
RETENTION_CHUNK = 500


def do_purge_memories(
    project_id: uuid.UUID,
    memory_ids: Sequence[uuid.UUID],
    *,
    actor: Actor | str,
    dry_run: bool = False,
) -> dict[str, int]:
    """Erase these memories for good (purge_expired: deleted longer ago than the retention
    period): the rows, their history and feedback, and their text wherever it was copied, as
    redaction does. One transaction and, when it erased something, one purge record."""
    if not memory_ids:
        return {}
    ids = sorted(memory_ids)
    subject = ("retention", ",".join(str(i) for i in ids))
    return _erase_memories(
        project_id, ids, redact=False, subject=subject, actor=_as_actor(actor), dry_run=dry_run
    )


def do_purge_event_payloads(
    project_id: uuid.UUID, *, before: datetime, actor: Actor | str, dry_run: bool = False
) -> dict[str, int]:
    """Blank the messages, metadata, results and graph summary of the project's finished add
    requests created before `before` (and the messages their history rows quote); the rows
    stay, with status, usage and timings. One purge record when it blanked something."""
    subject = erasure_subject_hash(project_id, "retention", before.isoformat())
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT engram_purge_events(%s, %s, %s, %s, %s)",
            [project_id, before, subject, str(_as_actor(actor)), dry_run],
        )
        return _counts(cursor.fetchone(), ("events", "history"))
