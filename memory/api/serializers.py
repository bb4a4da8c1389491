"""Request validation of the Mem0-compatible memory API, and memory_data, a memory's body.

Response shapes are documented in responses.py.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from django.conf import settings
from django.db.models import Q
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import Direction, extend_schema_field
from rest_framework import serializers

from config.inputs import UnsafeInputError, parse_json, parse_python_literal
from memory.actions import Message
from memory.graph import MAX_DEPTH, MAX_LIMIT
from memory.models import (
    SCOPE_FIELDS,
    SCOPE_MAX_LENGTH,
    Memory,
    metadata_error,
    scope_id_error,
)
from memory.parts import (
    IMAGE,
    MAX_PARTS,
    MAX_URL_CHARS,
    PART_TYPES,
    Part,
    PartError,
    may_fetch,
    parse_part,
    refuse_fetch,
)
from memory.retrieval.filters import FilterError, compile_filters
from memory.text.temporal import LATEST_EPOCH, reference_moment

ROLES = ("user", "assistant", "system", "tool")
MEMORY_TYPES = ("procedural_memory",)
# 9999-12-31T23:59:59Z: the last moment a Python datetime (and so the API) can represent.
MAX_TIMESTAMP = 253_402_300_799
# The largest UTC offset PostgreSQL takes in a timestamptz value (Python takes up to 23:59).
MAX_UTC_OFFSET = timedelta(hours=15, minutes=59, seconds=59)


def too_long(length: int, unit: str = "characters") -> serializers.ValidationError:
    """The one message for every length limit (ENGRAM_MAX_TEXT_CHARS)."""
    limit = settings.ENGRAM_MAX_TEXT_CHARS
    return serializers.ValidationError(f"is {length} {unit}; the limit is {limit}.")


class TextField(serializers.CharField):
    """Text that is stored: not whitespace only, at most ENGRAM_MAX_TEXT_CHARS characters.

    (NUL characters and lone surrogates never get here: config.inputs refuses them.)
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if value and not value.strip():
            raise serializers.ValidationError("must not be only whitespace.")
        if len(value) > settings.ENGRAM_MAX_TEXT_CHARS:
            raise too_long(len(value))
        return value


class BoundedJSONField(serializers.JSONField):
    """A JSON value whose text is at most ENGRAM_MAX_TEXT_CHARS characters."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        length = len(json.dumps(value, ensure_ascii=False))
        if length > settings.ENGRAM_MAX_TEXT_CHARS:
            raise too_long(length, "characters of JSON")
        return value


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JSONObjectField(BoundedJSONField):
    """Documented as a JSON object; the serializer's validate_<field> refuses anything else."""


def validate_filters(value: Any) -> dict[str, Any]:
    """A filter object's shape (compiled later, once, with the request's scope ids)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise serializers.ValidationError("must be a JSON object.")
    return value


def compiled(filters: dict[str, Any]) -> Q:
    try:
        return compile_filters(filters)
    except FilterError as exc:
        raise serializers.ValidationError({"filters": str(exc)}) from None


def compiled_scope_ids(ids: dict[str, str]) -> Q:
    """Scope ids of a query string (DELETE /v1/memories/?user_id=…), by the filters' rules:
    each one named equal ("*": set to anything), the others not tested."""
    for field, value in ids.items():
        if (problem := scope_id_error(value)) is not None:
            raise serializers.ValidationError({field: problem})
    try:
        return compile_filters(ids, exact_scope=False)
    except FilterError as exc:
        raise serializers.ValidationError(str(exc)) from None


def parse_query_filters(raw: str) -> dict[str, Any]:
    """`filters` in a query string: JSON, or the Python dict repr the mem0ai client sends."""
    try:
        value = parse_json(raw, "filters")
    except UnsafeInputError:
        try:
            value = parse_python_literal(raw, "filters")
        except UnsafeInputError as exc:
            raise serializers.ValidationError(
                {"filters": f"must be a JSON object (or a Python dict literal): {exc}"}
            ) from None
    if not isinstance(value, dict):
        raise serializers.ValidationError({"filters": "must be a JSON object."})
    return value


class ScopeIdField(serializers.CharField):
    """A scope id, by the rule of every entry point (memory.models.scope_id_error); max_length
    only documents it in the schema."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            max_length=SCOPE_MAX_LENGTH,
            required=False,
            allow_null=True,
            allow_blank=False,
            **kwargs,
        )

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, bool) or not isinstance(data, str | int):
            self.fail("invalid")
        value = super().to_internal_value(str(data))
        if (problem := scope_id_error(value)) is not None:
            raise serializers.ValidationError(problem)
        return value


class ScopeMixin(serializers.Serializer[dict[str, Any]]):
    """Scope ids top-level (user_id=…) or inside `filters` (the 2.x client's add)."""

    user_id = ScopeIdField()
    agent_id = ScopeIdField()
    app_id = ScopeIdField()
    run_id = ScopeIdField()

    def scope(self) -> dict[str, str | None]:
        return scope_of(self.validated_data)

    def where(self) -> Q:
        """The compiled condition: `filters` plus the top-level scope ids (set by validate)."""
        query: Q = self.validated_data["where"]
        return query


def merged_filters(data: dict[str, Any]) -> dict[str, Any]:
    """`filters` with the top-level scope ids added (a filter's own value wins)."""
    filters = dict(data.get("filters") or {})
    for field in SCOPE_FIELDS:
        value = data.get(field)
        if value is not None and field not in filters:
            filters[field] = value
    return filters


class FilteredMixin(ScopeMixin):
    """Search, list and export: compile the filters once, while validating."""

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["where"] = compiled(merged_filters(attrs))
        return attrs


class ReadFlagsMixin(serializers.Serializer[dict[str, Any]]):
    """Mem0's read flags over superseded and merged memories (search and list alike)."""

    latest_only = serializers.BooleanField(
        required=False,
        default=True,
        help_text="True (engram's default): active memories only. False: also the memories an "
        "update superseded, each with lifecycle_state `superseded` and `replaced_by`.",
    )
    include_merged = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Accepted for Mem0 clients; no effect: engram never merges memories.",
    )


def scope_of(data: dict[str, Any]) -> dict[str, str | None]:
    """Scope ids given top-level, or as plain values inside `filters`."""
    filters = data.get("filters") or {}
    scope: dict[str, str | None] = {}
    for field in SCOPE_FIELDS:
        value = data.get(field)
        if value is None and isinstance(filters.get(field), str | int):
            value = str(filters[field])
        scope[field] = value
    return scope


def validate_metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if (problem := metadata_error(value)) is not None:
        raise serializers.ValidationError(problem)
    return dict(value)


@dataclasses.dataclass(frozen=True)
class PartMessage(Message):
    """A message whose content is one multimodal part (memory.parts); `content` is the part's
    placeholder text. Only extraction (infer=true) reads parts."""

    part: Part = dataclasses.field(kw_only=True)


def _part_schema(kind: str) -> dict[str, Any]:
    inner = {"url": {"type": "string", "minLength": 1, "maxLength": MAX_URL_CHARS}}
    if kind == IMAGE:
        inner["detail"] = {"description": "OpenAI's image detail: accepted, ignored."}
    return {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": [kind]},
            kind: {
                "type": "object",
                "properties": inner,
                "required": ["url"],
                "additionalProperties": False,
            },
        },
        "required": ["type", kind],
        "additionalProperties": False,
    }


PART_SCHEMA = {
    "description": 'One multimodal part (infer=true only): {"type": T, T: {"url": ...}}.',
    "oneOf": [_part_schema(kind) for kind in PART_TYPES],
}


@extend_schema_field({"oneOf": [{"type": "string"}, PART_SCHEMA]})
class ContentField(serializers.Field):  # type: ignore[type-arg]
    """A message's content: text (TextField's rules), or one multimodal part object."""

    def to_internal_value(self, data: Any) -> str | Part:
        if isinstance(data, dict):
            try:
                return parse_part(data)
            except PartError as exc:
                raise serializers.ValidationError(str(exc)) from None
        text: str = TextField(allow_blank=False).run_validation(data)
        return text

    def to_representation(self, value: Any) -> Any:
        return value


class MessageSerializer(serializers.Serializer[dict[str, Any]]):
    role = serializers.ChoiceField(choices=ROLES)
    content = ContentField()
    name = serializers.CharField(required=False, allow_blank=True, max_length=SCOPE_MAX_LENGTH)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "maxItems": settings.ENGRAM_MAX_MESSAGES,
             "items": {"type": "object", "properties": {
                "role": {"type": "string", "enum": list(ROLES)},
                "content": {"oneOf": [{"type": "string"}, PART_SCHEMA]},
                "name": {"type": "string"}}, "required": ["role", "content"]}},
        ]
    }
)  # fmt: skip
class MessagesField(serializers.Field):  # type: ignore[type-arg]
    """A list of {role, content}; a string or a single object is accepted like the clients do."""

    def to_internal_value(self, data: Any) -> list[Message]:
        if isinstance(data, str):
            data = [{"role": "user", "content": data}]
        elif isinstance(data, dict):
            data = [data]
        if not isinstance(data, list) or not data:
            raise serializers.ValidationError("must be a non-empty list of {role, content}.")
        if len(data) > settings.ENGRAM_MAX_MESSAGES:
            raise serializers.ValidationError(
                f"has {len(data)} messages; the limit is {settings.ENGRAM_MAX_MESSAGES}."
            )
        messages = MessageSerializer(data=data, many=True)
        if not messages.is_valid():
            raise serializers.ValidationError(messages.errors)
        parts = sum(isinstance(m["content"], Part) for m in messages.validated_data)
        if parts > MAX_PARTS:
            raise serializers.ValidationError(
                f"has {parts} content parts (image_url, pdf_url, txt_url, mdx_url); "
                f"the limit is {MAX_PARTS}."
            )
        return [
            PartMessage(m["role"], content.placeholder(), m.get("name", ""), part=content)
            if isinstance(content := m["content"], Part)
            else Message(m["role"], content, m.get("name", ""))
            for m in messages.validated_data
        ]

    def to_representation(self, value: Any) -> Any:
        return value


@functools.cache
def _timezones() -> frozenset[str]:
    return frozenset(available_timezones())


class AddSerializer(ScopeMixin):
    messages = MessagesField()
    filters = BoundedJSONField(required=False, allow_null=True)
    metadata = JSONObjectField(required=False, allow_null=True)
    infer = serializers.BooleanField(required=False, default=True)
    timestamp = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_TIMESTAMP
    )
    expiration_date = serializers.DateField(required=False, allow_null=True)
    immutable = serializers.BooleanField(required=False, default=False)
    memory_type = serializers.ChoiceField(choices=MEMORY_TYPES, required=False, allow_null=True)
    custom_instructions = TextField(required=False, allow_blank=True)
    custom_categories = BoundedJSONField(required=False, allow_null=True)
    includes = TextField(required=False, allow_blank=True)
    excludes = TextField(required=False, allow_blank=True)
    # When the messages were said, for extraction (relative dates, the memories' time): Mem0 v3's
    # observation_date (YYYY-MM-DD) or observation_datetime (ISO 8601), read in `timezone`
    # (an IANA name; UTC by default). Without them, `timestamp`, else the time of the request.
    observation_date = serializers.DateField(required=False, allow_null=True)
    observation_datetime = serializers.CharField(required=False, allow_null=True, max_length=64)
    timezone = serializers.CharField(required=False, allow_blank=True, max_length=64)

    def validate_metadata(self, value: Any) -> dict[str, Any]:
        return validate_metadata(value)

    def validate_timezone(self, value: str) -> str:
        if value and value not in _timezones():
            raise serializers.ValidationError(f"unknown time zone {value!r} (an IANA name).")
        return value

    def validate_observation_datetime(self, value: str | None) -> datetime | None:
        if not value:
            return None
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise serializers.ValidationError("must be an ISO 8601 date and time.") from None
        offset = moment.utcoffset()
        if offset is not None and abs(offset) > MAX_UTC_OFFSET:
            raise serializers.ValidationError(
                "has a UTC offset beyond ±15:59:59, which PostgreSQL cannot store."
            )
        return moment

    def validate_filters(self, value: Any) -> dict[str, Any]:
        if value is not None and not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object.")
        return value or {}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        filters = attrs.get("filters") or {}
        for field in SCOPE_FIELDS:
            # A scope id given inside `filters` is stored like a top-level one: same rules.
            if attrs.get(field) is None and isinstance(filters.get(field), str | int):
                try:
                    ScopeIdField().run_validation(filters[field])
                except serializers.ValidationError as exc:
                    raise serializers.ValidationError({f"filters.{field}": exc.detail}) from None
        scope = scope_of(attrs)
        if not any(scope.values()):
            raise serializers.ValidationError(
                "Give at least one of user_id, agent_id, app_id, run_id (top-level or in filters)."
            )
        if attrs.get("memory_type") and not scope.get("agent_id"):
            raise serializers.ValidationError(
                {"memory_type": "procedural_memory summarises an agent's steps: give agent_id."}
            )
        wildcard = [field for field, value in scope.items() if value == "*"]
        if wildcard:
            raise serializers.ValidationError(
                f"{wildcard[0]} '*' matches any value in filters; a memory needs a real id."
            )
        validate_parts(attrs["messages"], infer=attrs["infer"])
        check_observation_time(attrs)
        return attrs

    def event_payload(self, project_instructions: str, project_categories: Any) -> dict[str, Any]:
        """What a worker needs to process this request later (JSON only)."""
        data = self.validated_data
        expiration = data.get("expiration_date")
        return {
            "messages": [
                {
                    "role": m.role,
                    "content": m.part.as_json() if isinstance(m, PartMessage) else m.content,
                    "name": m.name,
                }
                for m in data["messages"]
            ],
            "scope": self.scope(),
            "metadata": data.get("metadata") or {},
            "timestamp": data.get("timestamp"),
            "expiration_date": expiration.isoformat() if expiration else None,
            "immutable": data["immutable"],
            "custom_instructions": data.get("custom_instructions") or project_instructions,
            "custom_categories": category_names(
                data.get("custom_categories") or project_categories
            ),
            "includes": data.get("includes", ""),
            "excludes": data.get("excludes", ""),
            "memory_type": data.get("memory_type"),
            "observed_at": self.observed_at(),
            "timezone": data.get("timezone") or "",
        }

    def observed_at(self) -> str | None:
        """observation_datetime, or observation_date's midnight, as an aware ISO moment read
        in `timezone`; None without either."""
        moment = observed_moment(self.validated_data)
        return moment.isoformat() if moment is not None else None

    def created_at(self) -> datetime | None:
        ts = self.validated_data.get("timestamp")
        return datetime.fromtimestamp(ts, tz=UTC) if ts is not None else None


def observed_moment(data: dict[str, Any]) -> datetime | None:
    """observation_datetime, or observation_date's midnight, aware: a time without an offset is
    read in `timezone` (UTC by default); None without either."""
    moment: datetime | None = data.get("observation_datetime")
    if moment is None and data.get("observation_date") is not None:
        moment = datetime.combine(data["observation_date"], time())
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(data.get("timezone") or "UTC"))
    return moment


def check_observation_time(data: dict[str, Any]) -> None:
    """Refuse the moment extraction will read (the observation, else `timestamp`) if it leaves
    years 1-9999 in UTC or in `timezone`, where the worker takes its local date: the worker
    could not represent it (OverflowError), after the request was answered 200."""
    field = next((f for f in ("observation_datetime", "observation_date") if data.get(f)), None)
    moment = observed_moment(data)
    if moment is None and data.get("timestamp") is not None:
        field, moment = "timestamp", datetime.fromtimestamp(data["timestamp"], tz=UTC)
    if moment is None or field is None:
        return
    zone = data.get("timezone") or "UTC"
    try:
        moment.astimezone(UTC)
        moment.astimezone(ZoneInfo(zone))
    except (OverflowError, ValueError):
        raise serializers.ValidationError(
            {field: f"is outside years 1-9999 in UTC or in the time zone {zone}."}
        ) from None


def validate_parts(messages: Sequence[Message], *, infer: bool) -> None:
    """Content parts need extraction (infer=true), and a document URL an allowed host."""
    for index, message in enumerate(messages):
        if not isinstance(message, PartMessage):
            continue
        part = message.part
        if not infer:
            raise serializers.ValidationError({"messages": {str(index): {"content": [
                f"{part.type} content needs infer=true: with infer=false messages are stored "
                "verbatim, and only text can be."]}}})  # fmt: skip
        if part.is_document and part.url and not may_fetch(part.url):
            raise serializers.ValidationError(
                {"messages": {str(index): {"content": [refuse_fetch(part.url, part.type)]}}}
            )
    sent = sum(m.part.size for m in messages if isinstance(m, PartMessage) and m.part.is_document)
    if sent > settings.ENGRAM_MAX_DOCUMENT_BYTES:
        raise serializers.ValidationError({"messages": [
            f"the text documents sent as base64 are {sent} bytes together; the limit is "
            f"{settings.ENGRAM_MAX_DOCUMENT_BYTES} (ENGRAM_MAX_DOCUMENT_BYTES)."]})  # fmt: skip


def category_names(value: Any) -> list[str]:
    """Mem0 sends categories as names or as [{"name": "description"}]; keep the names."""
    names: list[str] = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, dict):
            names += [str(key) for key in item]
    return names


@extend_schema_field(
    {"oneOf": [{"type": "number", "minimum": 0, "maximum": LATEST_EPOCH},
               {"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}],
     "nullable": True}
)  # fmt: skip
class ReferenceDateField(serializers.Field):  # type: ignore[type-arg]
    """Mem0's `reference_date`: epoch seconds, a date or an ISO datetime (memory.retrieval
    .temporal.reference_moment)."""

    def to_internal_value(self, data: Any) -> datetime:
        try:
            return reference_moment(data)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from error

    def to_representation(self, value: Any) -> Any:
        return value


class SearchSerializer(ReadFlagsMixin, FilteredMixin):
    query = serializers.CharField(trim_whitespace=True, max_length=4000)
    filters = serializers.JSONField(required=False, allow_null=True)
    top_k = serializers.IntegerField(required=False, default=20, min_value=1, max_value=1000)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=1000)
    threshold = serializers.FloatField(required=False, default=0.1, min_value=0, max_value=1)
    rerank = serializers.BooleanField(required=False, default=False)
    categories = serializers.ListField(
        child=serializers.CharField(max_length=SCOPE_MAX_LENGTH), required=False, max_length=100
    )
    show_expired = serializers.BooleanField(required=False, default=False)
    reference_date = ReferenceDateField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The 'now' of temporal expressions in the query ('last week', 'in May', "
        "'3 days ago'): epoch seconds, a date (YYYY-MM-DD) or an ISO datetime; default now. "
        "Memories whose event time falls outside the window the query names rank lower.",
    )
    enable_graph = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also answer with `relations`: the graph's relations behind the results and "
        "those touching entities the query names; the answer is then an object on every version.",
    )
    keyword_search = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Accepted for Mem0 clients; no effect: every search already ranks by keywords "
        "as well as by meaning (what Mem0's flag turns on).",
    )

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only: not a string of digits, a boolean or a float (2.0)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        value: int = super().to_internal_value(data)
        return value


class GraphFilterMixin(ScopeMixin):
    """The graph reads: scope ids top-level or in `filters`, merged (memory.queries.graph_edges
    reads them the way search does); valid relations only unless include_invalid."""

    filters = serializers.JSONField(required=False, allow_null=True)
    include_invalid = serializers.BooleanField(required=False, default=False)

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["filters"] = merged_filters(attrs)
        return attrs


class GraphTraverseSerializer(GraphFilterMixin):
    entity = TextField(help_text="The entity's name (matched normalised: case and spaces).")
    depth = StrictIntegerField(
        required=False, default=1, min_value=1, max_value=MAX_DEPTH, help_text="Hops, 1-3."
    )
    limit = StrictIntegerField(
        required=False, default=50, min_value=1, max_value=MAX_LIMIT, help_text="Relations."
    )


class GraphListSerializer(GraphFilterMixin):
    """GET /v1/graph/: the query string's scope ids, filters (parsed) and include_invalid."""


class ListSerializer(ReadFlagsMixin, FilteredMixin):
    filters = serializers.JSONField(required=False, allow_null=True)
    categories = serializers.ListField(
        child=serializers.CharField(max_length=SCOPE_MAX_LENGTH), required=False, max_length=100
    )
    show_expired = serializers.BooleanField(required=False, default=False)
    start_date = serializers.DateTimeField(required=False)
    end_date = serializers.DateTimeField(required=False)

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)


class DeleteSerializer(serializers.Serializer[dict[str, Any]]):
    """DELETE /v1/memories/{id}/'s query string."""

    delete_linked = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also delete, transitively, the memories this one superseded "
        "(`linked_memory_ids`); the answer then carries `cascade_count`.",
    )


class UpdateSerializer(serializers.Serializer[dict[str, Any]]):
    text = TextField(required=False)
    metadata = JSONObjectField(required=False, allow_null=True)
    expiration_date = serializers.DateField(required=False, allow_null=True)
    timestamp = serializers.IntegerField(required=False, min_value=0, max_value=MAX_TIMESTAMP)

    def validate_metadata(self, value: Any) -> dict[str, Any]:
        return validate_metadata(value)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # The 1.x clients call the new text "data".
        if isinstance(data, dict) and "text" not in data and "data" in data:
            data = {**data, "text": data["data"]}
        attrs: dict[str, Any] = super().to_internal_value(data)
        return attrs

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        text = attrs.get("text")
        if text is not None and not text.strip():
            raise serializers.ValidationError({"text": "must not be empty."})
        attrs["text"] = text
        return attrs


class BatchItemSerializer(serializers.Serializer[dict[str, Any]]):
    memory_id = serializers.UUIDField()
    text = TextField(required=False, allow_blank=False)
    metadata = JSONObjectField(required=False, allow_null=True)

    def validate_metadata(self, value: Any) -> dict[str, Any] | None:
        return validate_metadata(value) if value is not None else None


class BatchSerializer(serializers.Serializer[dict[str, Any]]):
    memories = BatchItemSerializer(many=True, allow_empty=False, max_length=1000)  # type: ignore[call-arg]

    def validate_memories(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ids = [item["memory_id"] for item in value]
        if len(set(ids)) != len(ids):
            raise serializers.ValidationError("lists the same memory_id twice.")
        return value


class BatchSchema(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """The batch's size limits, which drf-spectacular does not read off a ListSerializer."""

    target_class = BatchSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(  # type: ignore[no-untyped-call]
            self.target, direction, bypass_extensions=True
        )
        memories = self.target.fields["memories"]
        schema["properties"]["memories"] |= {"minItems": 1, "maxItems": memories.max_length}
        return schema


class FeedbackSerializer(serializers.Serializer[dict[str, Any]]):
    memory_id = serializers.UUIDField()
    feedback = serializers.ChoiceField(
        choices=["POSITIVE", "NEGATIVE", "VERY_NEGATIVE"], required=False, allow_null=True
    )
    feedback_reason = TextField(required=False, allow_blank=True, allow_null=True)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict) and isinstance(data.get("feedback"), str):
            data = {**data, "feedback": data["feedback"].upper()}
        attrs: dict[str, Any] = super().to_internal_value(data)
        return attrs


# Any JSON value but null (OpenAPI 3.0 has no "null" type to exclude, so the others are listed).
@extend_schema_field(
    {"anyOf": [{"type": kind} for kind in ("object", "array", "string", "number", "boolean")]}
)
class NonNullJSONField(BoundedJSONField):
    pass


class ExportSerializer(serializers.Serializer[dict[str, Any]]):
    schema = NonNullJSONField(required=False, default=dict)
    filters = serializers.JSONField(required=False, allow_null=True)

    def validate_filters(self, value: Any) -> dict[str, Any]:
        return validate_filters(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["where"] = compiled(attrs.get("filters") or {})
        return attrs


class ExportGetSerializer(serializers.Serializer[dict[str, Any]]):
    memory_export_id = serializers.UUIDField(required=False)
    filters = BoundedJSONField(required=False, allow_null=True)


def memory_data(memory: Memory, linked: Sequence[uuid.UUID] | None = None) -> dict[str, Any]:
    """A memory's body; `linked` (queries.linked_memory_ids) adds `linked_memory_ids`."""
    data = {
        "id": str(memory.id),
        "memory": memory.text,
        "user_id": memory.user_id,
        "agent_id": memory.agent_id,
        "app_id": memory.app_id,
        "run_id": memory.run_id,
        "session_id": memory.run_id,
        "actor_id": memory.actor_id or None,
        "role": memory.role or None,
        "hash": memory.hash,
        "metadata": memory.metadata,
        "categories": list(memory.categories),
        "immutable": memory.immutable,
        "expiration_date": memory.expiration_date.isoformat() if memory.expiration_date else None,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
        "structured_attributes": memory.structured_attributes,
        "replaced_by": str(memory.replaced_by_id) if memory.replaced_by_id else None,
        "synthesized": False,
        "lifecycle_state": memory.state,
        "event_id": str(memory.source_event_id) if memory.source_event_id else None,
    }
    if linked is not None:
        data["linked_memory_ids"] = [str(i) for i in linked]
    return data
