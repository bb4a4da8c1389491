"""What the API modules share: the caller, its tenant transaction, the project's memories,
paging checks.

A view validates its input and embeds any text first, then does all its database work inside
`tenant(request)`: one transaction in the key's project (tenants.db.project_context), in which
the request's access-log row is written just before the commit, so the row commits together
with what it records. Nothing below the views sees a request.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request

from audit.access import log_request, note_access
from memory import context, queries
from memory import search as searching
from memory.actions import Actor
from memory.api import serializers as s
from memory.models import Memory, MemoryQuerySet
from memory.retrieval.filters import scope_values
from tenants.authentication import request_key
from tenants.db import project_context


def actor(request: Request) -> Actor:
    return Actor.api_key(request_key(request))


def project_id(request: Request) -> uuid.UUID:
    return request_key(request).project_id


@contextmanager
def tenant(request: Request, status: int = 200) -> Iterator[uuid.UUID]:
    """The request's one transaction, in its key's project; yields the project id.

    Its access-log row (with `status`) is written at the end, inside the transaction. If the
    block raises, everything rolls back and the access-log middleware records the failure.
    """
    project = project_id(request)
    with project_context(project, before_commit=lambda: log_request(request, status)):
        yield project


def get_memory(request: Request, memory_id: uuid.UUID) -> Memory:
    """The project's memory, or 404 — also for another project's id, which must not leak."""
    found = queries.get_memory(project_id(request), memory_id)
    if found is None:
        raise NotFound()
    return found


def matching(request: Request, data: dict[str, Any]) -> MemoryQuerySet:
    """Active memories (superseded ones too if latest_only is false) matching the validated
    filters (compiled by the serializer, with the top-level scope ids), categories and expiry
    options."""
    note_access(request, scope=scope_values(s.merged_filters(data)))
    return queries.matching(
        project_id(request),
        data["where"],
        show_expired=bool(data.get("show_expired")),
        categories=data.get("categories") or (),
        created_from=data.get("start_date"),
        created_to=data.get("end_date"),
        latest_only=data.get("latest_only", True),
    )


# Page numbers and sizes have at most 9 digits (documented: responses.paging).
MAX_PAGE = 999_999_999
_DIGITS = re.compile(r"[0-9]{1,9}")


class MemoryPagination(PageNumberPagination):
    # The rows before their count: a row stored meanwhile never pushes one off the page.
    django_paginator_class = queries.StablePaginator
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 200


def _positive(request: Request, name: str, maximum: int = MAX_PAGE) -> None:
    raw = request.query_params.get(name)
    if raw is None:
        return
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
    if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= maximum:
        raise serializers.ValidationError(
            {name: f"must be an integer of at least 1 and at most {maximum}."}
        )


class EntityPagination(PageNumberPagination):
    # Large pages: the official client's delete_users() reads only the first one.
    page_size = 1000
    page_size_query_param = "page_size"
    max_page_size = 1000


def context_block_for(request: Request, data: dict[str, Any]) -> context.Block:
    """The block for a validated request (ContextRequestSerializer): the API's and MCP's."""
    memories = matching(request, data)
    text = data.get("query") or ""

    def attempt() -> context.Gathered:
        query = (
            searching.prepare(
                project_id(request), memories, text, reference=data.get("reference_date")
            )
            if text
            else None
        )
        with tenant(request) as project:
            gathered = context.gather(
                project, memories, query, top_k=data["top_k"], threshold=data["threshold"]
            )
            note_access(request, result_count=len(gathered.memories))
        return gathered

    return context.render(searching.following_a_switch(attempt), data["max_tokens"])
