"""POST /v1/memories/: the add request (AddSerializer), when its messages were said
(observation time, time zone), and what the worker receives (event_payload).

May import memory.api.serializers.fields, .filters and .messages, memory.actions (AddInput),
memory.models, tenants.models (Project), Django settings and DRF.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from rest_framework import serializers

from memory.actions import AddInput
from memory.api.serializers.fields import (
    MAX_TIMESTAMP,
    BoundedJSONField,
    JSONObjectField,
    OutputFormatField,
    ScopeIdField,
    TextField,
    own_scope_dropped,
    validate_metadata,
)
from memory.api.serializers.filters import ScopeMixin, scope_of
from memory.api.serializers.messages import MessagesField, PartMessage, validate_parts
from memory.models import SCOPE_FIELDS
from tenants.models import Project

MEMORY_TYPES = ("procedural_memory",)


# The largest UTC offset PostgreSQL takes in a timestamptz value (Python takes up to 23:59).
MAX_UTC_OFFSET = timedelta(hours=15, minutes=59, seconds=59)


@functools.cache
def _timezones() -> frozenset[str]:
    return frozenset(available_timezones())


class AddSerializer(ScopeMixin):
    # The ids a memory is stored with: also not "." or ".." (fields.DOT_SEGMENTS).
    user_id = ScopeIdField(stored=True)
    agent_id = ScopeIdField(stored=True)
    app_id = ScopeIdField(stored=True)
    run_id = ScopeIdField(stored=True)
    messages = MessagesField()
    filters = BoundedJSONField(required=False, allow_null=True)
    metadata = JSONObjectField(
        required=False,
        allow_null=True,
        help_text="Scope ids are columns, never metadata: a user_id, agent_id, app_id or run_id "
        "here that repeats the request's own is dropped; any other is refused (400).",
    )
    infer = serializers.BooleanField(required=False, default=True)
    async_mode = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="false: an infer=true add answers with what extraction did (ADD, UPDATE, "
        "DELETE, NONE), waiting up to ENGRAM_SYNC_ADD_WAIT_MS for the worker (202 with the "
        "event to poll past it). Absent on POST /v1/memories/: false, as mem0ai 0.1.x expects; "
        "absent elsewhere: true (queued).",
    )
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
    # Mem0's envelope of the v1 path's answer (memory.api.memories.added); no effect on v3.
    output_format = OutputFormatField(
        help_text='On POST /v1/memories/ only. "v1.1" with version "v2": a queued add answers '
        '{"results": [...], "relations": []} instead of a bare list. "v1.0": an infer=false '
        "add answers the bare list of its results instead of an object."
    )
    version = serializers.ChoiceField(
        choices=["v1", "v2"],
        required=False,
        allow_null=True,
        help_text='Mem0\'s; only with output_format "v1.1" on POST /v1/memories/.',
    )

    def validate_metadata(self, value: Any) -> dict[str, Any]:
        # Scope ids in it are judged in validate(), against the request's own.
        return validate_metadata(value, scope_ids=True)

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
            # A scope id given inside `filters` is stored like a top-level one: same rules,
            # same cleaning (scope_of then reads the cleaned one).
            if attrs.get(field) is None and isinstance(filters.get(field), str | int):
                try:
                    attrs[field] = ScopeIdField(stored=True).run_validation(filters[field])
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
        if attrs.get("metadata"):
            attrs["metadata"] = own_scope_dropped(attrs["metadata"], scope)
        validate_parts(attrs["messages"], infer=attrs["infer"])
        check_observation_time(attrs)
        return attrs

    def add_input(self, project: Project) -> AddInput:
        """The validated request, for actions.prepare_add and actions.do_add; `project` gives the
        instructions and categories a queued add falls back on."""
        data = self.validated_data
        return AddInput(
            scope=self.scope(),
            messages=data["messages"],
            infer=data["infer"],
            payload=(self.event_payload(project) if data["infer"] else {}),
            metadata=data.get("metadata"),
            created_at=self.created_at(),
            expiration_date=data.get("expiration_date"),
            immutable=data["immutable"],
        )

    def event_payload(self, project: Project) -> dict[str, Any]:
        """What a worker needs to process this request later (JSON only); the project's
        instructions, categories, includes and excludes where the request has none."""
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
            "custom_instructions": data.get("custom_instructions") or project.custom_instructions,
            "custom_categories": category_names(
                data.get("custom_categories") or project.custom_categories
            ),
            "includes": data.get("includes") or project.includes,
            "excludes": data.get("excludes") or project.excludes,
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


def category_names(value: Any) -> list[str]:
    """Mem0 sends categories as names or as [{"name": "description"}]; keep the names."""
    names: list[str] = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, dict):
            names += [str(key) for key in item]
    return names
