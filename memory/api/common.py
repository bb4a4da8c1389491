"""What the API modules share: the caller's identity, the project's memories, paging checks."""

from __future__ import annotations

import re
import uuid
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request

from audit.access import note_access
from memory.api import serializers as s
from memory.models import Memory, MemoryQuerySet
from memory.retrieval.filters import scope_values
from tenants.authentication import request_key


def actor(request: Request) -> str:
    return f"api:{request_key(request).prefix}"


def project_memories(request: Request) -> MemoryQuerySet:
    return Memory.objects.for_project(request_key(request).project_id)


def get_memory(request: Request, memory_id: uuid.UUID) -> Memory:
    """The project's memory, or 404 — also for another project's id, which must not leak."""
    memory = (
        project_memories(request).light().exclude(state=Memory.State.DELETED).filter(pk=memory_id)
    )
    found = next(iter(memory), None)
    if found is None:
        raise NotFound()
    return found


def matching(request: Request, data: dict[str, Any]) -> MemoryQuerySet:
    """Active memories matching the validated filters (compiled by the serializer, with the
    top-level scope ids), categories and expiry options."""
    queryset = project_memories(request).active().filter(data["where"])
    if not data.get("show_expired"):
        queryset = queryset.unexpired()
    if data.get("categories"):
        queryset = queryset.filter(categories__overlap=[c.lower() for c in data["categories"]])
    if data.get("start_date"):
        queryset = queryset.filter(created_at__gte=data["start_date"])
    if data.get("end_date"):
        queryset = queryset.filter(created_at__lte=data["end_date"])
    note_access(request, scope=scope_values(s.merged_filters(data)))
    return queryset


_DIGITS = re.compile(r"[0-9]{1,9}")


class MemoryPagination(PageNumberPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 200


def _positive(request: Request, name: str, maximum: int | None = None) -> None:
    raw = request.query_params.get(name)
    if raw is None:
        return
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
    if not _DIGITS.fullmatch(raw) or int(raw) < 1 or (maximum is not None and int(raw) > maximum):
        bound = f" and at most {maximum}" if maximum else ""
        raise serializers.ValidationError({name: f"must be an integer of at least 1{bound}."})


class EntityPagination(PageNumberPagination):
    # Large pages: the official client's delete_users() reads only the first one.
    page_size = 1000
    page_size_query_param = "page_size"
    max_page_size = 1000
