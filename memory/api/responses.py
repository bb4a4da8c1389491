"""Response shapes of the memory API, as documented in the OpenAPI schema.

The views build their bodies as plain dicts (serializers.memory_data, memories.history_data,
events.event_data, and inline): faster than serializing through DRF on the list endpoints. These
serializers only document those bodies, field for field and in the same order;
tests/memory/test_api_schema.py checks every real response against them. The add endpoints'
answers are in memory.api.add_responses.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
)
from rest_framework import serializers

from memory.api.add_responses import EVENT_STATUS, GRAPH_STATUS, RESULT_EVENTS
from memory.api.common import MAX_PAGE
from memory.models import (
    SCOPE_FIELDS,
    SCOPE_MAX_LENGTH,
    Feedback,
    Memory,
    MemoryHistory,
)
from tenants.api import Closed, ErrorSerializer


class MemorySerializer(Closed):
    id = serializers.UUIDField()
    memory = serializers.CharField(help_text="The memory's text.")
    user_id = serializers.CharField(allow_null=True)
    agent_id = serializers.CharField(allow_null=True)
    app_id = serializers.CharField(allow_null=True)
    run_id = serializers.CharField(allow_null=True)
    session_id = serializers.CharField(allow_null=True, help_text="The run_id (Mem0's name).")
    actor_id = serializers.CharField(allow_null=True, help_text="Who said it (a message's name).")
    role = serializers.CharField(allow_null=True, help_text="The role of the source message.")
    hash = serializers.CharField(help_text="SHA-256 of the text: exact duplicates share it.")
    metadata = serializers.DictField(child=serializers.JSONField())
    categories = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="Null when the memory has none (as Mem0 answers), never an empty list.",
    )
    immutable = serializers.BooleanField()
    expiration_date = serializers.DateField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    structured_attributes = serializers.DictField(child=serializers.JSONField())
    replaced_by = serializers.UUIDField(
        allow_null=True, help_text="The memory that superseded this one."
    )
    synthesized = serializers.BooleanField(help_text="Always false.")
    lifecycle_state = serializers.ChoiceField(choices=Memory.State.choices)
    event_id = serializers.UUIDField(allow_null=True, help_text="The add request it came from.")
    linked_memory_ids = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        help_text="The memories this one superseded, transitively, nearest first (what "
        "delete_linked also deletes). On the REST reads; not in exports.",
    )


class ScoreBreakdownSerializer(Closed):
    semantic = serializers.FloatField(help_text="Cosine similarity to the query, clamped at 0.")
    bm25 = serializers.FloatField(
        help_text="Keyword rank (BM25), bounded (rank / (rank + 1)) and counted as far as the "
        "meaning confirms it."
    )
    entity = serializers.FloatField(
        help_text="Entities the query names (or matches by meaning), weighed by rarity."
    )
    relevance = serializers.FloatField(
        help_text="The fitted ranker's score of the memory's features (these signals, the "
        "best of its conversation's others, the time window); the results are in its order."
    )
    distinctiveness = serializers.FloatField(
        help_text="The query's, the same for every result: how far the scope's closest memory "
        "in meaning stands out from the next 29 (its cosine less their mean)."
    )
    answer_gap = serializers.FloatField(
        help_text="The query's, the same for every result, <= 0: how far the scope's closest "
        "memory in meaning falls short of the closest of engram's reference facts (everyday "
        "facts about no one), beyond 0.3. Below 0, the question is likely about something the "
        "scope never mentions, and every score is lowered."
    )
    ranker = serializers.CharField(
        help_text="The fitted ranker and calibrator that scored it: the embedding model whose "
        "file it is and the file's digest (memory/retrieval/rankers/, docs/search.md)."
    )
    rerank = serializers.FloatField(
        required=False,
        help_text="Only with rerank true, for a result the reranker ranked: its relevance by "
        "the reranker (a service's own scale; the judge's in [0, 1]). The results are then in "
        "the reranker's order; `score` stays the fused one (docs/rerank.md).",
    )


class ScoredMemorySerializer(MemorySerializer):
    score = serializers.FloatField(
        help_text="In [0, 1], calibrated on labelled data, the same across queries and scopes: "
        "a fitted logistic of the relevance, the query's distinctiveness and its answer gap. "
        "`threshold` cuts on it (default 0.5: nothing is returned when nothing stored is "
        "about the query). How search works: docs/search.md."
    )
    score_breakdown = ScoreBreakdownSerializer()


class SearchVerdictSerializer(Closed):
    """What every search object says besides its results (Mem0's clients ignore it)."""

    nothing_relevant = serializers.BooleanField(
        help_text="True when no memory scored `threshold` or more: `results` is empty because "
        "nothing stored is about the query (as far as the score can tell), not by error."
    )
    best_score = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="Only with nothing_relevant true: the best score any memory considered had "
        "(below the threshold); null when the scope holds no memory.",
    )
    reranked = serializers.BooleanField(
        required=False,
        help_text="Only with rerank true: whether the results are in the reranker's order. "
        "False: they keep the fused order (no reranker configured, or it was slow, down or "
        "answered something unusable).",
    )
    warning = serializers.CharField(
        required=False,
        help_text="Only when the query's language is one the embedding model was not trained "
        "on (an English model asked in Chinese): then only memories sharing a word with the "
        "query are returned, since its meaning cannot be compared (docs/languages.md).",
    )


class SearchResultsSerializer(SearchVerdictSerializer):
    results = ScoredMemorySerializer(many=True)


class PageSerializer(Closed):
    count = serializers.IntegerField(help_text="Items on all pages.")
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)


class MemoryPageSerializer(PageSerializer):
    results = MemorySerializer(many=True)


class MemoryResultsSerializer(Closed):
    """output_format "v1.1" without paging: the list in an object (Mem0's v1.1 shape)."""

    results = MemorySerializer(many=True)


MEMORY_LIST = PolymorphicProxySerializer(
    component_name="MemoryListOrPage",
    serializers=[MemorySerializer(many=True), MemoryResultsSerializer, MemoryPageSerializer],
    resource_type_field_name=None,
    many=False,
)


class MessageResultSerializer(Closed):
    message = serializers.CharField()


class ErasureQueuedSerializer(Closed):
    message = serializers.CharField()
    event_id = serializers.UUIDField(help_text="The erasure request: GET /v1/erasures/{id}/.")
    status = serializers.ChoiceField(choices=["PENDING"])


class ErasureSerializer(Closed):
    id = serializers.UUIDField()
    subject_kind = serializers.ChoiceField(choices=["user"])
    status = serializers.ChoiceField(choices=["PENDING", "SUCCEEDED", "FAILED"])
    attempts = serializers.IntegerField()
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Rows removed or rewritten per store."
    )
    error = serializers.CharField(allow_null=True, help_text="The last failure's kind, if any.")
    created_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField(allow_null=True)


class DeletedSerializer(Closed):
    message = serializers.CharField()
    cascade_count = serializers.IntegerField(
        required=False,
        help_text="With delete_linked=true only: how many older memories it superseded were "
        "deleted with it.",
    )


class DeleteAllResultSerializer(Closed):
    message = serializers.CharField()
    deleted = serializers.IntegerField(help_text="How many memories were deleted.")


class HistoryEntrySerializer(Closed):
    id = serializers.UUIDField()
    memory_id = serializers.UUIDField()
    event = serializers.ChoiceField(choices=MemoryHistory.Event.choices)
    old_memory = serializers.CharField(allow_null=True)
    new_memory = serializers.CharField(allow_null=True)
    input = serializers.ListField(
        child=serializers.DictField(child=serializers.JSONField()),
        help_text="The messages that led to the change ({role, content}).",
    )
    actor = serializers.CharField(help_text='Who changed it, e.g. "api:<key prefix>".')
    event_id = serializers.UUIDField(allow_null=True, help_text="The add request, if any.")
    user_id = serializers.CharField(allow_null=True)
    agent_id = serializers.CharField(allow_null=True)
    app_id = serializers.CharField(allow_null=True)
    run_id = serializers.CharField(allow_null=True)
    session_id = serializers.CharField(allow_null=True, help_text="The run_id (Mem0's name).")
    categories = serializers.ListField(
        child=serializers.CharField(), allow_null=True, help_text="Null when there were none."
    )
    metadata = serializers.DictField(child=serializers.JSONField())
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField(help_text="Equal to created_at: rows never change.")


class EventResultSerializer(Closed):
    id = serializers.UUIDField()
    memory = serializers.CharField()
    event = serializers.ChoiceField(choices=RESULT_EVENTS)
    previous_memory = serializers.CharField(required=False, help_text="UPDATE only.")
    replaces = serializers.UUIDField(required=False, help_text="UPDATE only: the old memory.")


class GraphChangeSerializer(Closed):
    id = serializers.IntegerField(help_text="The edge's id in the project's graph.")
    source = serializers.CharField()  # type: ignore[assignment]  # a field, not Field.source
    relationship = serializers.CharField()
    destination = serializers.CharField()


class GraphEntityRefSerializer(Closed):
    name = serializers.CharField()
    type = serializers.CharField()


class EventGraphSerializer(Closed):
    status = serializers.ChoiceField(choices=GRAPH_STATUS)
    entities = GraphEntityRefSerializer(many=True, required=False)
    added = GraphChangeSerializer(many=True, required=False)
    invalidated = GraphChangeSerializer(many=True, required=False)


class EventSerializer(Closed):
    id = serializers.UUIDField()
    event_type = serializers.ChoiceField(choices=["ADD"])
    status = serializers.ChoiceField(choices=EVENT_STATUS)
    payload = serializers.DictField(
        child=serializers.JSONField(), help_text="The add request, as queued."
    )
    metadata = serializers.DictField(child=serializers.JSONField())
    results = EventResultSerializer(many=True)
    error = serializers.CharField(allow_null=True)
    warning = serializers.CharField(
        allow_null=True,
        help_text="Set when the request's user messages hold first-person statements but "
        "extraction found no fact at all (a model that may not be working); the request still "
        "SUCCEEDED. Filter the list with ?warning=true.",
    )
    extractor = serializers.CharField(allow_null=True, help_text="Which extractor processed it.")
    attempts = serializers.IntegerField()
    usage = serializers.DictField(child=serializers.JSONField(), help_text="Model tokens used.")
    timings = serializers.DictField(child=serializers.JSONField())
    graph_status = serializers.ChoiceField(
        choices=GRAPH_STATUS,
        allow_null=True,
        help_text="What graph extraction did: SUCCEEDED, SKIPPED (no new memory, or graph "
        "extraction off) or FAILED (the model's graph output was unusable; the facts are stored "
        "and the reason is in `error`). Null until processed.",
    )
    graph = EventGraphSerializer(
        allow_null=True,
        help_text="The entities the request's new memories are about, and the relations added "
        "(or merged into an existing edge) and invalidated (contradicted). Null until processed.",
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)
    latency = serializers.FloatField(allow_null=True, help_text="Milliseconds, once completed.")
    reverted_at = serializers.DateTimeField(
        allow_null=True, help_text="When it was reverted (POST /v1/event/{id}/revert/), if it was."
    )
    reverted_by = serializers.CharField(allow_null=True, help_text='Who reverted it ("api:…").')


class EventPageSerializer(PageSerializer):
    results = EventSerializer(many=True)


REVERTED_EVENTS = ["DELETE", "RESTORE"]


class RevertedMemorySerializer(Closed):
    id = serializers.UUIDField()
    memory = serializers.CharField()
    event = serializers.ChoiceField(
        choices=REVERTED_EVENTS,
        help_text="DELETE: a memory the request added; RESTORE: one it superseded or deleted.",
    )


class RevertedRelationsSerializer(Closed):
    invalidated = GraphChangeSerializer(
        many=True, help_text="Relations only the request's memories backed, now invalid."
    )
    revalidated = GraphChangeSerializer(
        many=True, help_text="Relations it had ended (superseded or contradicted), valid again."
    )


class RevertSerializer(Closed):
    id = serializers.UUIDField(help_text="The add request (event) reverted.")
    status = serializers.ChoiceField(choices=["REVERTED"])
    reverted_at = serializers.DateTimeField()
    reverted_by = serializers.CharField(help_text='Who reverted it, e.g. "api:<key prefix>".')
    results = RevertedMemorySerializer(many=True)
    relations = RevertedRelationsSerializer()


class RevertConflictItemSerializer(Closed):
    memory_id = serializers.UUIDField()
    change = serializers.ChoiceField(choices=MemoryHistory.Event.choices)
    history_id = serializers.UUIDField(help_text="The history row of the later change.")
    event_id = serializers.UUIDField(allow_null=True, help_text="Its add request, if any.")
    actor = serializers.CharField()
    at = serializers.DateTimeField()


class RevertConflictSerializer(Closed):
    detail = serializers.CharField(help_text="Why nothing was reverted.")
    conflicts = RevertConflictItemSerializer(
        many=True, help_text="The later changes to the request's memories, oldest first."
    )


class EntitySerializer(Closed):
    id = serializers.CharField(help_text="The name (Mem0 clients read `name`).")
    name = serializers.CharField()
    type = serializers.ChoiceField(choices=["user", "agent", "app", "run"])
    total_memories = serializers.IntegerField()
    created_at = serializers.DateTimeField(help_text="When its first memory was made.")
    updated_at = serializers.DateTimeField(help_text="When a memory of it last changed.")
    owner = serializers.CharField(allow_null=True, help_text="Always null.")
    metadata = serializers.DictField(child=serializers.JSONField(), help_text="Always {}.")


class EntityPageSerializer(PageSerializer):
    results = EntitySerializer(many=True)
    total_users = serializers.IntegerField()
    total_agents = serializers.IntegerField()
    total_apps = serializers.IntegerField()
    total_runs = serializers.IntegerField()


class FeedbackResultSerializer(Closed):
    id = serializers.UUIDField()
    feedback = serializers.ChoiceField(choices=Feedback.Kind.values, allow_null=True)
    feedback_reason = serializers.CharField()


class ExportCreatedSerializer(Closed):
    message = serializers.CharField()
    id = serializers.UUIDField()


class MemoryExportSerializer(Closed):
    id = serializers.UUIDField()
    schema = serializers.JSONField(help_text="As given when the export was created.")
    filters = serializers.DictField(child=serializers.JSONField())
    created_at = serializers.DateTimeField()
    count = serializers.IntegerField()
    results = MemorySerializer(
        many=True, help_text="The matching memories as they were when the export was made."
    )


REASONS = {
    400: "Invalid input: `detail` names the first problem, `errors` lists them all.",
    401: "No API key, or an invalid or revoked one.",
    413: "The body is larger than ENGRAM_MAX_BODY_BYTES.",
    415: "The body is not JSON (Content-Type).",
    429: "Over the key's request rate (ENGRAM_API_RATE); see Retry-After.",
    503: "The hosted embedding service failed; nothing was changed. Retry later.",
}
NO_SUCH_MEMORY = "No such memory in this project."
KEY_REUSED = "The Idempotency-Key was already used with a different request (path or body)."
PAST_THE_END = "A page past the last one."


def answers(
    success: dict[int, Any],
    *,
    body: bool = False,
    embeds: bool = False,
    errors: dict[int, str] | None = None,
) -> dict[int, Any]:
    """An operation's documented responses: `success`; 401 and 429 (any request with a key);
    400, 413 and 415 if it takes a JSON body; 503 if it embeds text; `errors` (status: why)."""
    reasons = {401: REASONS[401], 429: REASONS[429]}
    if body:
        reasons |= {400: REASONS[400], 413: REASONS[413], 415: REASONS[415]}
    if embeds:
        reasons[503] = REASONS[503]
    reasons |= errors or {}
    return success | {
        status: OpenApiResponse(ErrorSerializer, description=reason)
        for status, reason in sorted(reasons.items())
    }


RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    int,
    OpenApiParameter.HEADER,
    response=[429],
    required=True,
    description="Seconds until the key may send again.",
)
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    pattern=r"^[A-Za-z0-9._:-]{8,128}$",
    description=(
        "Optional. A retry with the same key and the same request (path and JSON body) gets the "
        "first answer again (same status and body; nothing is stored twice), for "
        "ENGRAM_IDEMPOTENCY_HOURS (default 24) per project; the same key with another request "
        "gets 409. 8 to 128 characters of A-Z a-z 0-9 . _ : -, else 400."
    ),
)


def paging(max_page_size: int) -> list[OpenApiParameter]:
    """The page parameters of a list whose pages hold at most `max_page_size` items."""
    return [
        OpenApiParameter(
            "page", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}, description="From 1."
        ),
        OpenApiParameter("page_size", {"type": "integer", "minimum": 1, "maximum": max_page_size}),
    ]


SCOPE_ID = {"type": "string", "minLength": 1, "maxLength": SCOPE_MAX_LENGTH}
SCOPE_PARAMETERS = [
    OpenApiParameter(name, SCOPE_ID, description='An id, or "*" for any.') for name in SCOPE_FIELDS
] + [OpenApiParameter("filters", str, description="A filter object: JSON or a Python dict.")]
SHOW_EXPIRED = OpenApiParameter("show_expired", bool)
READ_FLAGS = [
    OpenApiParameter(
        "latest_only",
        bool,
        description="True (the default): active memories only. False: also superseded ones.",
    ),
    OpenApiParameter("include_merged", bool, description="No effect: engram never merges."),
]
OUTPUT_FORMAT = OpenApiParameter(
    "output_format",
    {"type": "string", "enum": ["v1.0", "v1.1"]},
    description='Without page or page_size: "v1.0" (the default) answers a bare list, "v1.1" an '
    'object {"results": [...]}.',
)
DELETE_LINKED = OpenApiParameter(
    "delete_linked",
    bool,
    description="Also delete, transitively, the memories this one superseded; the answer then "
    "carries cascade_count.",
)


# -- the graph (memory/api/graph.py, and search with enable_graph) ------------------------------


class GraphRelationSerializer(Closed):
    id = serializers.CharField(help_text="The edge's graph id.")
    # Fields named like Field attributes: DRF's metaclass moves them to _declared_fields.
    source = serializers.CharField(  # type: ignore[assignment]
        help_text="The source entity's (normalised) name."
    )
    source_id = serializers.CharField(help_text="The source entity's node id.")
    relationship = serializers.CharField(help_text='Normalised: lower case, "works_at".')
    destination = serializers.CharField()
    destination_id = serializers.CharField()
    valid = serializers.BooleanField(help_text="False once a later fact contradicted it.")
    created_at = serializers.DateTimeField()
    invalidated_at = serializers.DateTimeField(allow_null=True)
    memory_ids = serializers.ListField(
        child=serializers.UUIDField(), help_text="The memories that asserted it."
    )
    event_id = serializers.UUIDField(allow_null=True, help_text="The add request it came from.")
    user_id = serializers.CharField(allow_null=True)
    agent_id = serializers.CharField(allow_null=True)
    app_id = serializers.CharField(allow_null=True)
    run_id = serializers.CharField(allow_null=True)


class GraphNodeSerializer(Closed):
    id = serializers.CharField(help_text="The entity's graph id.")
    name = serializers.CharField(help_text="Normalised: lower case, single spaces.")
    display_name = serializers.CharField(help_text="As first written.")
    type = serializers.CharField(help_text='e.g. "person", "location"; "" when unknown.')
    mentions = serializers.IntegerField(help_text="How many memories name it.")
    created_at = serializers.DateTimeField()
    user_id = serializers.CharField(allow_null=True)
    agent_id = serializers.CharField(allow_null=True)
    app_id = serializers.CharField(allow_null=True)
    run_id = serializers.CharField(allow_null=True)


class GraphTraversalSerializer(Closed):
    nodes = GraphNodeSerializer(many=True, help_text="The start entities first.")
    relations = GraphRelationSerializer(many=True)


class GraphRelationPageSerializer(PageSerializer):
    results = GraphRelationSerializer(many=True)


class SearchRelationSerializer(Closed):
    source = serializers.CharField()  # type: ignore[assignment]
    relationship = serializers.CharField()
    destination = serializers.CharField()
    target = serializers.CharField(help_text="The destination again (the Mem0 Platform's name).")


class GraphSearchResultsSerializer(SearchVerdictSerializer):
    """enable_graph: the results and the relations (on v1 and v2 too, as Mem0 answered); on
    v1 and v2, output_format "v1.1" without enable_graph: the same with no relations."""

    results = ScoredMemorySerializer(many=True)
    relations = SearchRelationSerializer(many=True)


# Every search answer's headers (the bare list's only way to say nothing was relevant).
SEARCH_HEADERS = [
    OpenApiParameter(
        "Engram-Nothing-Relevant",
        {"type": "string", "enum": ["true", "false"]},
        OpenApiParameter.HEADER,
        response=[200],
        required=True,
        description="true when no memory scored `threshold` or more (the body's nothing_relevant).",
    ),
    OpenApiParameter(
        "Engram-Best-Score",
        {"type": "string", "pattern": r"^[0-9.e-]+$"},
        OpenApiParameter.HEADER,
        response=[200],
        description="The best score any memory considered had, returned or not (rounded as "
        "`score`); absent when the scope holds no memory.",
    ),
    OpenApiParameter(
        "Engram-Reranked",
        {"type": "string", "enum": ["true", "false"]},
        OpenApiParameter.HEADER,
        response=[200],
        required=True,
        description="Whether the results are in the reranker's order: true only when rerank "
        "was asked and done (the body's reranked).",
    ),
    OpenApiParameter(
        "Engram-Foreign-Language",
        {"type": "string"},
        OpenApiParameter.HEADER,
        response=[200],
        description="The query's language (ISO 639-1) when the embedding model was not trained "
        "on it; then only memories sharing a word with the query are returned (the body's "
        "warning).",
    ),
]
SEARCH_V3 = PolymorphicProxySerializer(
    component_name="SearchResponse",
    serializers=[SearchResultsSerializer, GraphSearchResultsSerializer],
    resource_type_field_name=None,
)
SEARCH_LEGACY = PolymorphicProxySerializer(
    component_name="SearchResponseLegacy",
    serializers=[ScoredMemorySerializer(many=True), GraphSearchResultsSerializer],
    resource_type_field_name=None,
    many=False,
)


# --- end-user dashboard links (memory/api/enduser.py) ---------------------------------------


class DashboardLinkSerializer(Closed):
    url = serializers.URLField(
        help_text="The user's own dashboard: absolute, signed; whoever holds it sees and can "
        "change that user's memories in this project until it expires."
    )
    expires_at = serializers.DateTimeField(help_text="When the link stops working (UTC).")


# -- Redaction (memory/api/redact.py) ----------------------------------------------------------


class RedactedSerializer(Closed):
    message = serializers.CharField()
    id = serializers.UUIDField(help_text="The redacted memory (its skeleton keeps this id).")
    counts = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Rows changed or removed per store (memories, feedback, entity_links, "
        "graph_entities, graph_relations, history, contexts, summaries, events, exports); all "
        "0 when the memory was already redacted.",
    )
