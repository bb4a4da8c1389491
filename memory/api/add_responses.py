"""The add endpoints' answers, as the OpenAPI schema documents them: an infer=false add's stored
results, a queued infer=true add (v1's one-item list, v2's object), a synchronous add's processed
results or the event to poll (memory.api.processed), and a kept request's error. Part of the
memory API's response shapes (memory.api.responses), under the same contract: field for field
what the views answer, checked against real responses by tests/memory/test_api_schema.py.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import Direction, OpenApiResponse, PolymorphicProxySerializer
from rest_framework import serializers

from memory.models import MemoryEvent
from tenants.api import Closed

# The add responses' `status` is the add event's status (SUCCEEDED or PENDING here): one enum
# for all, as distinct one-value enums per shape would need ENUM_NAME_OVERRIDES.
EVENT_STATUS = MemoryEvent.Status.choices
# What extraction (or an infer=false add) did with one fact or message.
RESULT_EVENTS = ["ADD", "UPDATE", "DELETE", "NONE"]
GRAPH_STATUS = ["SUCCEEDED", "SKIPPED", "FAILED"]


class AddedTextSerializer(Closed):
    memory = serializers.CharField()


class AddResultItemSerializer(Closed):
    id = serializers.UUIDField()
    # A field named like a Serializer property: DRF's metaclass moves it to _declared_fields.
    data = AddedTextSerializer()  # type: ignore[assignment]
    event = serializers.ChoiceField(
        choices=RESULT_EVENTS,
        help_text="infer=false: ADD, or NONE for an exact duplicate, already stored. A "
        "synchronous infer=true add: what extraction did with each fact.",
    )
    memory = serializers.CharField()
    previous_memory = serializers.CharField(
        required=False, help_text="UPDATE only (a synchronous infer=true add)."
    )
    replaces = serializers.UUIDField(
        required=False, help_text="UPDATE only: the old memory (a synchronous infer=true add)."
    )


class AddResultSerializer(Closed):
    """infer=false: the memories are stored when this answers."""

    message = serializers.CharField()
    status = serializers.ChoiceField(choices=EVENT_STATUS, help_text="SUCCEEDED.")
    event_id = serializers.UUIDField()
    results = AddResultItemSerializer(many=True)


class AddResultV1Serializer(AddResultSerializer):
    """infer=false on the v1 path: with Mem0's empty `relations`."""

    relations = serializers.ListField(child=serializers.JSONField(), max_length=0)


class QueuedAddSerializer(Closed):
    """infer=true: the request is queued; GET /v1/event/{event_id}/ tells when it is done."""

    message = serializers.CharField()
    status = serializers.ChoiceField(choices=EVENT_STATUS, help_text="PENDING.")
    event_id = serializers.UUIDField()


class QueuedAddListSerializer(serializers.Serializer[dict[str, Any]]):
    """The v1 path's queued answer: a list of one QueuedAdd (documented by QueuedAddList)."""


class QueuedAddList(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """Exactly one item: an infer=false add's list of results, which may be empty, must not also
    read as a queued answer (AddResponseV1 is a oneOf)."""

    target_class = QueuedAddListSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        item = auto_schema.resolve_serializer(QueuedAddSerializer(), direction)
        return {"type": "array", "items": item.ref, "minItems": 1, "maxItems": 1}


class QueuedAddV1Serializer(Closed):
    """infer=true on the v1 path with output_format "v1.1" and version "v2" (Mem0's shape)."""

    results = QueuedAddSerializer(many=True)
    relations = serializers.ListField(child=serializers.JSONField(), max_length=0)


class ProcessedAddSerializer(Closed):
    """A synchronous infer=true add (async_mode false; on POST /v1/memories/ also no async_mode
    with output_format "v1.1"): what extraction did (200, SUCCEEDED), or, not done within
    ENGRAM_SYNC_ADD_WAIT_MS, no results yet and the event to poll (202, PENDING or RUNNING)."""

    message = serializers.CharField()
    status = serializers.ChoiceField(choices=EVENT_STATUS, help_text="SUCCEEDED, PENDING, RUNNING.")
    event_id = serializers.UUIDField()
    results = AddResultItemSerializer(many=True)
    warning = serializers.CharField(
        allow_null=True, help_text="Why nothing was kept, when the messages state something."
    )


class KeptAddErrorSerializer(Closed):
    """A synchronous add whose request was kept but not processed: its extraction failed (502),
    or the request was erased meanwhile with its user (410)."""

    detail = serializers.CharField()
    event_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=EVENT_STATUS, required=False, help_text="FAILED.")


# A synchronous add's other answers (memory.api.processed).
SYNCHRONOUS_ADD = {
    202: OpenApiResponse(
        PolymorphicProxySerializer(
            component_name="AddNotYetProcessed",
            serializers=[ProcessedAddSerializer, QueuedAddListSerializer],
            resource_type_field_name=None,
            many=False,
        ),
        description="A synchronous add not processed within ENGRAM_SYNC_ADD_WAIT_MS: kept and "
        "queued; poll GET /v1/event/{event_id}/.",
    ),
    410: OpenApiResponse(KeptAddErrorSerializer, description="Erased with its user meanwhile."),
    502: OpenApiResponse(KeptAddErrorSerializer, description="Kept, but its extraction failed."),
}

ADD = PolymorphicProxySerializer(
    component_name="AddResponse",
    serializers=[AddResultSerializer, QueuedAddSerializer, ProcessedAddSerializer],
    resource_type_field_name=None,
)
# v1 answers a queued add with a one-item list (Mem0's legacy shape), or in an object with
# output_format "v1.1" and version "v2"; an infer=false add with output_format "v1.0" with the
# bare list of its results.
ADD_V1 = PolymorphicProxySerializer(
    component_name="AddResponseV1",
    serializers=[
        AddResultV1Serializer,
        QueuedAddListSerializer,
        QueuedAddV1Serializer,
        ProcessedAddSerializer,
        AddResultItemSerializer(many=True),
    ],
    resource_type_field_name=None,
    many=False,
)
