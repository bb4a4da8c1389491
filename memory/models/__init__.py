"""Memories: one fact (or one stored message) of one scope in one project."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import F, Func
from django.db.models.expressions import RawSQL
from django.utils import timezone
from pgvector.django import VectorField

from memory.models.scopes import SCOPE_FIELDS, SCOPE_MAX_LENGTH
from tenants.models import Project


def _keywords(column: str, weight: str) -> SearchVector:
    """A column's weighted keywords in the memory's language: the database functions of
    migration 0033 (engram_text_config maps the language to its text-search configuration,
    engram_keyword_text cuts Chinese, Japanese and Korean into character pairs)."""
    return SearchVector(
        Func(F(column), function="engram_keyword_text", output_field=models.TextField()),
        weight=weight,
        config=Func(F("language"), function="engram_text_config", output_field=models.TextField()),
    )


def metadata_error(value: object) -> str | None:
    """Why `value` cannot be a memory's metadata, or None: it must be a JSON object, and scope
    ids are columns, never metadata (Mem0 shipped the opposite as a tenant leak). The one rule
    for every entry point (the API, the dashboards)."""
    if not isinstance(value, dict):
        return "must be a JSON object."
    for key in value:
        if key in SCOPE_FIELDS:
            return f"{key!r} is a scope id and cannot be set through metadata; pass it as {key}."
    return None


def scope_id_error(value: object) -> str | None:
    """Why `value` cannot be a scope id (user_id, agent_id, app_id, run_id), or None: a string
    (an integer is read as its digits) of 1 to SCOPE_MAX_LENGTH characters, what the columns
    hold. The one rule for every entry point (add, the filters of every endpoint, query strings
    and paths), so an id no memory can have is refused the same way everywhere."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return "must be a string."
    length = len(str(value))
    if not length:
        return "must not be empty."
    if length > SCOPE_MAX_LENGTH:
        return f"must have at most {SCOPE_MAX_LENGTH} characters (this one has {length})."
    return None


def content_hash(text: str) -> str:
    """SHA-256 of a memory's text: exact duplicates in a scope are found by this, by index."""
    return hashlib.sha256(text.encode()).hexdigest()


def structured_attributes(moment: datetime) -> dict[str, Any]:
    """Calendar facts of a memory's time, in UTC (Memory.structured_attributes)."""
    utc = moment.astimezone(UTC)
    iso = utc.isocalendar()
    return {
        "day": utc.day,
        "month": utc.month,
        "year": utc.year,
        "hour": utc.hour,
        "minute": utc.minute,
        "day_of_week": utc.strftime("%A").lower(),
        "is_weekend": utc.weekday() >= 5,
        "quarter": (utc.month - 1) // 3 + 1,
        "week_of_year": iso.week,
    }


class Scoped(models.Model):
    """The four scope ids of Mem0 (free strings; NULL means "not in such a scope")."""

    user_id = models.CharField(max_length=SCOPE_MAX_LENGTH, null=True, blank=True)
    agent_id = models.CharField(max_length=SCOPE_MAX_LENGTH, null=True, blank=True)
    app_id = models.CharField(max_length=SCOPE_MAX_LENGTH, null=True, blank=True)
    run_id = models.CharField(max_length=SCOPE_MAX_LENGTH, null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def scope(self) -> dict[str, str | None]:
        return {field: getattr(self, field) for field in SCOPE_FIELDS}


class MemoryQuerySet(models.QuerySet["Memory"]):
    def for_project(self, project: Project | uuid.UUID) -> MemoryQuerySet:
        project_id = project.pk if isinstance(project, Project) else project
        return self.filter(project_id=project_id)

    def light(self) -> MemoryQuerySet:
        """Leave out the columns only search needs (the vector and the keyword document)."""
        return self.defer("embedding", "search_vector", "context_before", "context_after")

    def active(self) -> MemoryQuerySet:
        return self.filter(state=Memory.State.ACTIVE)

    def unexpired(self) -> MemoryQuerySet:
        today = timezone.now().date()
        return self.filter(
            models.Q(expiration_date__isnull=True) | models.Q(expiration_date__gte=today)
        )


class Memory(Scoped):
    class State(models.TextChoices):
        ACTIVE = "active"
        SUPERSEDED = "superseded"
        DELETED = "deleted"
        # A skeleton whose text is gone for good (POST /v1/memories/{id}/redact/): ids, scope,
        # dates and history rows stay; never listed, searched, changed or restored.
        REDACTED = "redacted"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memories")

    text = models.TextField()
    # SHA-256 of the text: exact duplicates in a scope are found by index, not by comparing text.
    hash = models.CharField(max_length=64)
    # The current embedding space's vector (memory.models.embedding: any dimension, one per
    # deployment; its HNSW index is SQL of its own, on the cast to that dimension).
    embedding = VectorField()
    # Words of the neighbouring messages in the conversation (the same add request, or the
    # scope's stored messages just before and after it: see actions.do_add_messages). They only
    # feed keyword search, at lower weight than the memory's own words (B before, C after);
    # never returned.
    context_before = models.TextField(blank=True, default="")
    context_after = models.TextField(blank=True, default="")
    # The text's language (ISO 639-1, memory.text.language.detect), filled by the actions that
    # write the text; its keywords (and its context's) are stemmed as that language's.
    language = models.CharField(max_length=8, blank=True, default="")
    search_vector = models.GeneratedField(
        expression=_keywords("text", "A")
        + _keywords("context_before", "B")
        + _keywords("context_after", "C"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    # The stored conversation a raw message (infer=false) belongs to: its add request's id, or
    # the conversation of the scope's message just before (or after) it in time when that one is
    # within ENGRAM_CONVERSATION_GAP_SECONDS; null for extracted memories. Search counts the best
    # signals of the rest of a memory's conversation among its features (retrieval.scoring:
    # conversation_semantic, conversation_keyword), whether the application added the
    # conversation at once or turn by turn.
    conversation_id = models.UUIDField(null=True, blank=True, editable=False)
    # Insertion order, which orders the messages stored with the same timestamp.
    seq = models.BigIntegerField(
        db_default=RawSQL("nextval('memory_memory_seq')", ()), editable=False
    )

    metadata = models.JSONField(default=dict, blank=True)
    categories = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    # Who said it, for stored messages: the message role and its optional `name`.
    role = models.CharField(max_length=20, blank=True, default="")
    actor_id = models.CharField(max_length=SCOPE_MAX_LENGTH, blank=True, default="")

    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    expiration_date = models.DateField(null=True, blank=True)
    # Calendar facts of created_at (day, month, year, hour, minute, day_of_week, is_weekend,
    # quarter, week_of_year), in UTC, for filtering and display.
    structured_attributes = models.JSONField(default=dict, blank=True)

    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    replaced_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    immutable = models.BooleanField(default=False)
    # Provenance: the add request (event) and the positions of its messages this came from.
    source_event_id = models.UUIDField(null=True, blank=True)
    source_positions = ArrayField(models.PositiveIntegerField(), default=list, blank=True)

    objects = MemoryQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "memories"
        indexes: ClassVar = [
            # memory_embedding_hnsw, partial on active rows (search never looks at superseded or
            # deleted memories), is on (embedding::vector(N)): memory.actions.reembed. The
            # keyword documents have no index: under row-level security the planner cannot use
            # one for `@@`, which is not leakproof (migration 0029).
            models.Index(
                name="memory_user_scope",
                fields=["project", "user_id", "created_at"],
                condition=models.Q(state="active"),
            ),
            models.Index(
                name="memory_agent_scope",
                fields=["project", "agent_id", "created_at"],
                condition=models.Q(state="active"),
            ),
            models.Index(
                name="memory_run_scope",
                fields=["project", "run_id"],
                condition=models.Q(state="active"),
            ),
            models.Index(
                name="memory_app_scope",
                fields=["project", "app_id"],
                condition=models.Q(state="active"),
            ),
            # The same for superseded rows, which reads include with latest_only=false.
            *(
                models.Index(
                    name=f"memory_superseded_{kind}",
                    fields=["project", f"{kind}_id", "created_at"],
                    condition=models.Q(state="superseded"),
                )
                for kind in ("user", "agent", "app", "run")
            ),
            models.Index(name="memory_project_hash", fields=["project", "hash"]),
            models.Index(name="memory_project_created", fields=["project", "created_at"]),
        ]

    def __str__(self) -> str:
        return self.text[:80]


class Feedback(models.Model):
    class Kind(models.TextChoices):
        POSITIVE = "POSITIVE"
        NEGATIVE = "NEGATIVE"
        VERY_NEGATIVE = "VERY_NEGATIVE"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="feedback")
    feedback = models.CharField(max_length=20, choices=Kind.choices, null=True, blank=True)
    feedback_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.feedback} on {self.memory_id}"


class MemoryExport(models.Model):
    """A snapshot of the memories matching some filters, as JSON (the Mem0 export API)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    schema = models.JSONField(default=dict, blank=True)
    filters = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"export {self.id}"


# MemoryEvent.warning: a user's add request from which extraction found no fact at all.
NOTHING_EXTRACTED = (
    "the user's messages hold first-person statements, but extraction found no fact in them: "
    "check that the model follows the output schema (or the request's instructions)"
)
NOTHING_KEPT = "nothing was kept: extraction found no fact about the user in these messages"
NOTHING_KEPT_OFFLINE = (
    "nothing was kept: the offline extractor (no model configured) keeps only statements in the "
    'user\'s own messages that speak in the first person ("I…", "my…") or about "the '
    "user\"; assistant and system messages are read only in an agent's own scope. Configure a "
    "model, or add with infer=false to store the messages as they are"
)
# The warning of an add request its scope's memories were deleted before it was processed.
DELETED_BEFORE_PROCESSING = (
    "nothing was kept: the memories of this request's scope were deleted before it was "
    "processed, and a delete covers the messages sent before it"
)


class MemoryEvent(Scoped):
    """The durable record of one asynchronous add request (the outbox the workers drain).

    PENDING -> RUNNING (claimed with a lease) -> SUCCEEDED | FAILED. Processing is idempotent:
    a claim is a conditional update, and results are written with the status in one transaction.
    Each claim gets a fresh `claim_id`; a worker writes to the event (renewing the lease, results,
    a failure) only while the token is still its own, so a worker whose lease ran out and whose
    event another worker has claimed since cannot overwrite the newer claim (extraction.claims).
    """

    class Status(models.TextChoices):
        PENDING = "PENDING"
        RUNNING = "RUNNING"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # The validated request: messages, scope, metadata, options (infer, memory_type, …).
    payload = models.JSONField()
    results = models.JSONField(default=list, blank=True)
    # What extraction did to the graph: {"status": SUCCEEDED | SKIPPED | FAILED, "entities",
    # "added", "invalidated"} (memory.extraction.graph_step.record_graph); {} until processed.
    graph = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    # Set when a user's add kept nothing (extraction.pipeline): NOTHING_EXTRACTED when the
    # user's messages state something in the first person (a model that may not be working),
    # else one of the NOTHING_KEPT texts.
    warning = models.TextField(blank=True, default="")
    extractor = models.CharField(max_length=20, blank=True, default="")
    attempts = models.PositiveSmallIntegerField(default=0)
    lease_until = models.DateTimeField(null=True, blank=True)
    claim_id = models.UUIDField(null=True, blank=True, editable=False)  # the current claim's token
    # Token usage ({"calls", "input_tokens", "output_tokens"}) and timings in milliseconds.
    usage = models.JSONField(default=dict, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # Its revert (memory.actions.do_revert_event): when, by whom ("kind:id", as history's
    # actor), and what it did (the API's answer, replayed to a second revert).
    reverted_at = models.DateTimeField(null=True, blank=True)
    reverted_by = models.CharField(max_length=200, blank=True, default="")
    reversal = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes: ClassVar = [
            models.Index(fields=["project", "status", "created_at"], name="event_project_status"),
            # The scope's earlier requests are the next extraction's "recent messages".
            models.Index(fields=["project", "user_id", "created_at"], name="event_user_scope"),
            models.Index(
                fields=["lease_until"],
                name="event_running_lease",
                condition=models.Q(status="RUNNING"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.status} {self.id}"


class UsageDay(models.Model):
    """What a project's add requests used on one day (UTC), for the requests no longer kept:
    erased with their user, or purged after the retention period. Counts only, no scope id
    and no text, so usage totals survive an erasure. Written only by the database, as events
    are deleted (migration 0024: memory_usageday_fold); memory.queries.usage_per_day adds it
    to the events still kept."""

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    events = models.BigIntegerField(default=0)
    calls = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "day"], name="usage_day_once"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.events}"


class RerankUsageDay(models.Model):
    """What a project's reranked searches (`rerank: true` with a reranker configured) used on
    one day (UTC): the searches, those the reranker ordered (the others kept the fused order:
    it failed or was slow), its calls and the tokens it reported. Counts only, no query and no
    scope id. One upsert after each reranked search (memory.actions.do_count_rerank)."""

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    searches = models.BigIntegerField(default=0)
    reranked = models.BigIntegerField(default=0)
    calls = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "day"], name="rerank_usage_day_once"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.searches}"


class ScopeSummary(Scoped):
    """The running summary of one scope's conversation, context for the next extraction.

    Kept up to date asynchronously, after each processed add request (memory.extraction.tasks).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    text = models.TextField(blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "scope summaries"
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["project", *SCOPE_FIELDS],
                name="one_summary_per_scope",
                nulls_distinct=False,
            )
        ]

    def __str__(self) -> str:
        return self.text[:80]


class MemoryHistory(Scoped):
    """One row per change to a memory (ADD / UPDATE / DELETE), written in the change's transaction.

    Append-only in the database, like the access log. `memory` has no database constraint so
    the history outlives the memory row.
    """

    APPEND_ONLY = True

    class Event(models.TextChoices):
        ADD = "ADD"
        UPDATE = "UPDATE"
        DELETE = "DELETE"
        RESTORE = "RESTORE"  # a deleted memory made active again (an operator's correction)
        REDACT = "REDACT"  # its text removed from it and every version (engram_erase_memories)
        REVERT = "REVERT"  # undone with the add request that made the change (do_revert_event)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    memory = models.ForeignKey(
        Memory,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="history",
    )
    event = models.CharField(max_length=10, choices=Event.choices)
    old_memory = models.TextField(null=True, blank=True)
    new_memory = models.TextField(null=True, blank=True)
    # Who made the change (memory.actions.Actor): "api:<key prefix>", "user:<username>",
    # "enduser:<user id>", "extractor:<event id>", "command:<name>".
    actor = models.CharField(max_length=200)
    # The add request (event) that caused it, when there was one.
    event_id = models.UUIDField(null=True, blank=True)
    input = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    categories = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "memory histories"
        # Created in the audit app, whose table it keeps (renamed by migration 0010).
        db_table = "memory_memoryhistory"
        indexes: ClassVar = [
            models.Index(fields=["memory", "created_at"], name="history_memory_time"),
        ]

    def __str__(self) -> str:
        return f"{self.event} {self.memory_id}"


class MemoryEntity(Scoped):
    """Which entities a memory mentions: the relational side of the graph (memory.graph).

    Search's hot path reads it ("memories linked to these entity names in this scope") without
    touching AGE; memory.graph writes it in the same transaction as the entity's vertex.
    `entity_name` is the normalised name (memory.graph.normalise_name); `vertex_id` is the
    entity's AGE graph id in the project's graph.
    """

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="entity_links")
    entity_name = models.TextField()
    vertex_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "memory entities"
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["memory", "entity_name"], name="memory_entity_once")
        ]
        indexes: ClassVar = [
            models.Index(
                fields=["project", "entity_name", "user_id"], name="memory_entity_name_scope"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.entity_name} in {self.memory_id}"


class EntityVector(Scoped):
    """The embedding of each entity name a scope has: search matches the query's words against
    the scope's entities by meaning as well as by name ("cities" finds "rome").

    Written with the first MemoryEntity row of the name in the scope (memory.graph, the linking
    job), one row per (scope, normalised name). It lives only as long as some memory of the
    scope is linked to the name: a trigger on memory_memoryentity (memory 0020) deletes the row
    when the last link goes, so erasure, which deletes the links, leaves no name behind.
    """

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    entity_name = models.TextField()
    embedding = VectorField()  # the current embedding space's, as Memory.embedding
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["project", "user_id", "agent_id", "app_id", "run_id", "entity_name"],
                name="entity_vector_once",
                nulls_distinct=False,
            )
        ]

    def __str__(self) -> str:
        return f"{self.entity_name} in {self.scope}"


class IdempotentRequest(models.Model):
    """The first answer to an add sent with an `Idempotency-Key`, replayed to its retries.

    Written in the add's own transaction (memory.api.idempotency), so an add never commits
    without its record nor a record without its add. `body_hash` is the SHA-256 of the request
    path and the canonical JSON of the parsed body (memory.api.idempotency.request_hash): the
    same key with another body is refused. A record older than ENGRAM_IDEMPOTENCY_HOURS counts
    as absent (the key is new again); purge_expired deletes those.
    """

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=128)
    body_hash = models.CharField(max_length=64)
    # The answer as first sent; status 0 only inside the add's transaction, never committed.
    status = models.PositiveSmallIntegerField(default=0)
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "key"], name="idempotency_key_once")
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"


# The user profiles' tables (a module of their own: this one holds the memories'): imported
# here so that `memory.models` names every model, as Django and the callers expect.
from memory.models.embedding import EmbeddingSpace  # noqa: E402
from memory.models.profiles import ProfileJob, ProfileSettings, UserProfile  # noqa: E402

__all__ = [
    "DELETED_BEFORE_PROCESSING",
    "NOTHING_EXTRACTED",
    "NOTHING_KEPT",
    "NOTHING_KEPT_OFFLINE",
    "SCOPE_FIELDS",
    "SCOPE_MAX_LENGTH",
    "EmbeddingSpace",
    "EntityVector",
    "Feedback",
    "IdempotentRequest",
    "Memory",
    "MemoryEntity",
    "MemoryEvent",
    "MemoryExport",
    "MemoryHistory",
    "MemoryQuerySet",
    "ProfileJob",
    "ProfileSettings",
    "RerankUsageDay",
    "ScopeSummary",
    "Scoped",
    "UsageDay",
    "UserProfile",
    "content_hash",
    "metadata_error",
    "scope_id_error",
    "structured_attributes",
]
