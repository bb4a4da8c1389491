"""A connection's fixed scope: the scope ids an MCP client pins for every tool call it makes.

An MCP host gives an agent a URL and headers once; pinning `user_id` there (a header or a query
parameter of the URL) keeps every call of that connection inside that user's memories, whatever
the model asks for. Without a pin the key's project is the bound, as in the REST API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest
from rest_framework import serializers

from config.inputs import UnsafeInputError, check_text
from memory.api.serializers import ScopeIdField
from memory.mcp.headers import SCOPE_HEADERS
from memory.models import SCOPE_FIELDS
from memory.retrieval.filters import LOGICAL, WILDCARD


class ScopeRefusedError(Exception):
    """A tool call naming scope ids other than those its connection fixed."""


def fixed_scope(request: HttpRequest) -> dict[str, str]:
    """The scope ids the connection fixed (header or query parameter); a 400 if malformed."""
    fixed: dict[str, str] = {}
    for field, header in SCOPE_HEADERS.items():  # or ?user_id=... on the URL
        given = {v for v in (request.headers.get(header), request.GET.get(field)) if v is not None}
        if len(given) > 1:
            raise serializers.ValidationError(
                {field: f"the {header} header and the {field} query parameter differ."}
            )
        if not given:
            continue
        value = given.pop()
        try:
            value = ScopeIdField().run_validation(check_text(value, header))
        except UnsafeInputError as exc:
            raise serializers.ValidationError({field: str(exc)}) from None
        except serializers.ValidationError as exc:
            raise serializers.ValidationError({field: exc.detail}) from None
        if value == WILDCARD:
            raise serializers.ValidationError({field: "a fixed scope needs a real id, not '*'."})
        fixed[field] = value
    return fixed


def _refuse(fixed: Mapping[str, str], field: str, value: Any) -> ScopeRefusedError:
    return ScopeRefusedError(
        f"This connection is fixed to {field}={fixed[field]!r}; it cannot use {field}={value!r}."
    )


def scope_ids(fixed: Mapping[str, str], given: Mapping[str, Any]) -> dict[str, Any]:
    """The ids a write or delete names: the fixed ones, plus those given for other fields."""
    ids = {field: given.get(field) for field in SCOPE_FIELDS}
    for field, value in fixed.items():
        if ids[field] is not None and ids[field] != value:
            raise _refuse(fixed, field, ids[field])
        ids[field] = value
    return ids


def within(fixed: Mapping[str, str], ids: Mapping[str, Any]) -> bool:
    """Whether a memory (or an add request) with these scope ids is inside the fixed scope."""
    return all(ids.get(field) == value for field, value in fixed.items())


def fixed_filters(fixed: Mapping[str, str], filters: Any) -> Any:
    """`filters` bound to the fixed scope: the fixed ids ANDed at the top level.

    A filter that names a fixed field anywhere (in AND, OR or NOT too) must name exactly the
    fixed value: another id, '*', or an operator (in, ne) is refused rather than narrowed, so
    the model learns that it cannot reach there. Anything that is not an object is left for the
    serializer to refuse.
    """
    if not fixed or not (filters is None or isinstance(filters, dict)):
        return filters
    pending: list[Any] = [filters or {}]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key in fixed:
                plain = value.get("eq") if isinstance(value, dict) and len(value) == 1 else value
                if plain != fixed[key]:
                    raise _refuse(fixed, key, value)
            elif key in LOGICAL:
                pending.append(value)
    return {**(filters or {}), **fixed}
