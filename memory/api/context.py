"""POST /v1/context/: the context block for an agent's next prompt (memory.context; issue #52).

The same filters and scope ids as search, a query (optional: without one, what is newest in the
scope), `max_tokens`, `reference_date` and a format: `text` answers the block and the ids of the
memories in it; `json` also each part (kind, text, tokens, memory id and score). The block never
exceeds max_tokens, never cuts a memory, says "Nothing stored is relevant." (in the query's
language) when nothing passes the threshold, and is the same for the same input.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from memory.api import responses as r
from memory.api.common import context_block_for
from memory.api.serializers.context import (
    ContextRequestSerializer,
    ContextSerializer,
    context_body,
)


@extend_schema(
    request=ContextRequestSerializer,
    responses=r.answers({200: ContextSerializer}, body=True, embeds=True),
    parameters=[r.RETRY_AFTER],
    summary="The context block for an agent's next prompt, within a token budget",
)
@api_view(["POST"])
def context_block(request: Request) -> Response:
    serializer = ContextRequestSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    return Response(context_body(context_block_for(request, data), parts=data["format"] == "json"))
