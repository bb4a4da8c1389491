"""Batch update and delete: up to 1000 memories, all or nothing."""

from __future__ import annotations

import uuid

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory import actions, queries
from memory.api import responses as r
from memory.api import serializers as s
from memory.api.common import actor, project_id, tenant
from memory.models import Memory


def _batch_memories(request: Request, ids: list[uuid.UUID]) -> dict[uuid.UUID, Memory]:
    found = queries.active_for_update(project_id(request), ids)
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise serializers.ValidationError(f"Memories not found: {', '.join(missing[:10])}.")
    return found


@extend_schema(
    methods=["PUT"],
    request=s.BatchSerializer,
    responses=r.answers({200: r.MessageResultSerializer}, body=True, embeds=True),
    parameters=[r.RETRY_AFTER],
    summary="Update up to 1000 memories, all or nothing",
)
@extend_schema(
    methods=["DELETE"],
    responses=r.answers({200: r.MessageResultSerializer}, body=True),
    parameters=[r.RETRY_AFTER],
    summary="Delete up to 1000 memories, all or nothing",
    # OpenAPI 3.0 cannot declare a request body for DELETE, which Mem0's clients send here.
    description='The JSON body lists them: `{"memories": [{"memory_id": "<uuid>"}, ...]}`.',
)
@api_view(["PUT", "DELETE"])
def batch(request: Request) -> Response:
    serializer = s.BatchSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    items = serializer.validated_data["memories"]
    vectors = actions.embed_texts(
        (i["text"] for i in items if i.get("text") is not None),
        max_tokens=settings.ENGRAM_MAX_EMBED_TOKENS,
    )
    with tenant(request):
        memories = _batch_memories(request, [item["memory_id"] for item in items])
        if request.method == "DELETE":
            count = actions.do_batch_delete(list(memories.values()), actor=actor(request))
            note_access(request, result_count=count)
            return Response({"message": f"Successfully deleted {count} memories"})
        updates = [
            actions.BatchUpdate(memories[i["memory_id"]], i.get("text"), i.get("metadata"))
            for i in items
        ]
        count = actions.do_batch_update(updates, actor=actor(request), vectors=vectors)
        note_access(request, result_count=count)
        return Response({"message": f"Successfully updated {count} memories"})
