"""Request validation of the Mem0-compatible memory API, and memory_data, a memory's body.

Response shapes are documented in responses.py.

This module is the package's interface: callers write `from memory.api import serializers as s`
and use `s.SearchSerializer`, `s.memory_data(…)`. The modules, by concern:

- fields: the field types every request shares (stored text, bounded JSON, scope ids), the
  cleaning of a scope id (scope_id) and the metadata check;
- filters: scope ids top-level or in `filters`, merged, and filters compiled while validating;
- messages: an add's messages and their multimodal parts;
- adds: the add request, its observation time and the worker's payload;
- reads: search and list;
- graph: the graph reads (list and traversal);
- writes: delete's query string, update, batch, feedback;
- exports: creating and reading an export;
- bodies: memory_data.

May import its own modules only. They may import memory.actions (Message), memory.models,
memory.parts, memory.retrieval.filters, memory.search, memory.graph, memory.text, config.inputs,
Django, DRF and drf-spectacular; never the API's views, memory.web or memory.mcp.
"""

from __future__ import annotations

from memory.api.serializers.adds import (
    MAX_UTC_OFFSET,
    MEMORY_TYPES,
    AddSerializer,
    category_names,
    check_observation_time,
    observed_moment,
)
from memory.api.serializers.bodies import (
    BEST_SCORE_HEADER,
    NOTHING_RELEVANT_HEADER,
    memory_data,
    search_headers,
    search_verdict,
)
from memory.api.serializers.exports import ExportGetSerializer, ExportSerializer, NonNullJSONField
from memory.api.serializers.fields import (
    DOT_SEGMENTS,
    MAX_TIMESTAMP,
    BoundedJSONField,
    JSONObjectField,
    ScopeIdError,
    ScopeIdField,
    TextField,
    scope_id,
    too_long,
    validate_metadata,
)
from memory.api.serializers.filters import (
    FilteredMixin,
    ScopeMixin,
    cleaned_scope_ids,
    compiled,
    compiled_scope_ids,
    merged_filters,
    normalised_filters,
    parse_query_filters,
    scope_of,
    validate_filters,
)
from memory.api.serializers.graph import (
    GraphFilterMixin,
    GraphListSerializer,
    GraphTraverseSerializer,
    StrictIntegerField,
)
from memory.api.serializers.messages import (
    PART_SCHEMA,
    ROLES,
    ContentField,
    MessageSerializer,
    MessagesField,
    PartMessage,
    validate_parts,
)
from memory.api.serializers.reads import (
    ListSerializer,
    ReadFlagsMixin,
    ReferenceDateField,
    SearchSerializer,
)
from memory.api.serializers.writes import (
    BatchItemSerializer,
    BatchSchema,
    BatchSerializer,
    DeleteSerializer,
    FeedbackSerializer,
    UpdateSerializer,
)

__all__ = [
    "BEST_SCORE_HEADER",
    "DOT_SEGMENTS",
    "MAX_TIMESTAMP",
    "MAX_UTC_OFFSET",
    "MEMORY_TYPES",
    "NOTHING_RELEVANT_HEADER",
    "PART_SCHEMA",
    "ROLES",
    "AddSerializer",
    "BatchItemSerializer",
    "BatchSchema",
    "BatchSerializer",
    "BoundedJSONField",
    "ContentField",
    "DeleteSerializer",
    "ExportGetSerializer",
    "ExportSerializer",
    "FeedbackSerializer",
    "FilteredMixin",
    "GraphFilterMixin",
    "GraphListSerializer",
    "GraphTraverseSerializer",
    "JSONObjectField",
    "ListSerializer",
    "MessageSerializer",
    "MessagesField",
    "NonNullJSONField",
    "PartMessage",
    "ReadFlagsMixin",
    "ReferenceDateField",
    "ScopeIdError",
    "ScopeIdField",
    "ScopeMixin",
    "SearchSerializer",
    "StrictIntegerField",
    "TextField",
    "UpdateSerializer",
    "category_names",
    "check_observation_time",
    "cleaned_scope_ids",
    "compiled",
    "compiled_scope_ids",
    "memory_data",
    "merged_filters",
    "normalised_filters",
    "observed_moment",
    "parse_query_filters",
    "scope_id",
    "scope_of",
    "search_headers",
    "search_verdict",
    "too_long",
    "validate_filters",
    "validate_metadata",
    "validate_parts",
]
