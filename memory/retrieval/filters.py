"""The Mem0 v2/v3 filter language, compiled to a Django Q (SQL with parameters only).

    {"user_id": "alice", "created_at": {"gte": "2024-01-01"}}        siblings are ANDed
    {"OR": [{"user_id": "alice"}, {"agent_id": "bot"}]}               AND / OR take lists
    {"NOT": {"categories": {"in": ["spam"]}}}                         NOT takes one filter
    {"metadata": {"topic": "food", "lang": {"ne": "fr"}}}             per-key metadata conditions

Scope semantics (as Mem0's platform): a filter constrains the scope fields (user_id, agent_id,
app_id, run_id) it names and no others, so {"user_id": "alice"} is every memory of alice's,
those she shares with an agent, an app or a run included (Mem0's entity-scoped-memory guide:
"Unmentioned entities are not constrained"). "*" is any value (not null); an id required unset
is written {"NOT": {"agent_id": "*"}}.

Every endpoint that filters compiles here, so a filter reads the same everywhere: an impossible
condition (an empty `in` list, OR of nothing) matches nothing and NOT of it everything; a scope
id is refused by the rule of every entry point (memory.models.scope_id_error); text matches are
capped (ENGRAM_MAX_FILTER_OPERAND_CHARS, ENGRAM_MAX_FILTER_TEXT_CONDITIONS).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, time
from typing import Any

from django.conf import settings
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from memory.models import SCOPE_FIELDS, scope_id_error

LOGICAL = ("AND", "OR", "NOT")
TIME_FIELDS = ("created_at", "updated_at", "expiration_date")
FIELDS = (*SCOPE_FIELDS, *TIME_FIELDS, "categories", "metadata", "keywords", "memory_ids")
WILDCARD = "*"
# What one filter may hold, so that its cost is bounded: conditions (a field's operator, a
# metadata key, a logical operator) and values (every operand and list item), in all.
MAX_DEPTH = 10
MAX_CONDITIONS = 100
MAX_VALUES = 1000
# The conditions that match a text operand inside stored text (LIKE): the field and its
# operators; for metadata, the operators of each key. Their cost grows with the rows, the
# length of the text and the length of the operand, so their operands together are capped
# (ENGRAM_MAX_FILTER_OPERAND_CHARS, ENGRAM_MAX_FILTER_TEXT_CONDITIONS).
TEXT_MATCHES = {
    "keywords": ("eq", "contains", "icontains"),
    "categories": ("contains",),
    "metadata": ("contains",),
}


class FilterError(ValueError):
    """A filter the language does not allow; the message names the offending key."""


def compile_filters(filters: dict[str, Any] | None) -> Q:
    """Return the Q for `filters`: the scope ids they name tested, the others not.

    The one compiler of every endpoint that filters (search, lists, exports, deletes, the
    graph): {"user_id": "alice"} and `DELETE /v1/memories/?user_id=alice` both reach all of
    Alice's memories, whatever their agent, app or run.
    """
    if not filters:
        return Q()
    if not isinstance(filters, dict):
        raise FilterError("filters must be a JSON object.")
    _check_size(filters)
    _check_text_matches(filters)
    return _compile(filters, depth=0)


def _check_size(filters: dict[str, Any]) -> None:
    """Refuse a filter over the limits before compiling it (without recursion)."""
    conditions = values = 0
    stack: list[tuple[Any, int]] = [(filters, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > 2 * MAX_DEPTH + 4:
            raise FilterError(f"filters nest deeper than {MAX_DEPTH} levels.")
        if isinstance(node, dict):
            conditions += len(node)
            stack.extend((item, depth + 1) for item in node.values())
        elif isinstance(node, list):
            if len(node) > MAX_VALUES:
                raise FilterError(f"filters hold more than {MAX_VALUES} values.")
            stack.extend((item, depth + 1) for item in node)
        else:
            values += 1  # an operand, or one item of a list
        if conditions > MAX_CONDITIONS:
            raise FilterError(f"filters hold more than {MAX_CONDITIONS} conditions.")
        if values > MAX_VALUES:
            raise FilterError(f"filters hold more than {MAX_VALUES} values.")


def _text_operands(field: str, value: Any) -> Iterable[str]:
    """The string operands of the text-matching conditions (TEXT_MATCHES) of one field."""
    operators = TEXT_MATCHES[field]
    conditions = value.values() if field == "metadata" and isinstance(value, dict) else [value]
    for condition in conditions:
        pairs = condition.items() if isinstance(condition, dict) else [("eq", condition)]
        yield from (v for op, v in pairs if op in operators and isinstance(v, str))


def _check_text_matches(filters: dict[str, Any]) -> None:
    """Refuse a filter whose text matches would cost too much (after _check_size)."""
    chars = count = 0
    pending: list[Any] = [filters]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in LOGICAL:
                    pending.append(value)
                elif key in TEXT_MATCHES:
                    for operand in _text_operands(key, value):
                        chars, count = chars + len(operand), count + 1
    most_chars = settings.ENGRAM_MAX_FILTER_OPERAND_CHARS
    if chars > most_chars:
        raise FilterError(
            f"filters match {chars} characters of text (keywords, contains); the limit is "
            f"{most_chars} (ENGRAM_MAX_FILTER_OPERAND_CHARS)."
        )
    most = settings.ENGRAM_MAX_FILTER_TEXT_CONDITIONS
    if count > most:
        raise FilterError(
            f"filters hold {count} text matches (keywords, contains); the limit is {most} "
            "(ENGRAM_MAX_FILTER_TEXT_CONDITIONS)."
        )


def scope_fields_named(filters: Any) -> Iterable[str]:
    if isinstance(filters, dict):
        for key, value in filters.items():
            if key in SCOPE_FIELDS:
                yield key
            elif key in LOGICAL:
                yield from scope_fields_named(value)
    elif isinstance(filters, list):
        for item in filters:
            yield from scope_fields_named(item)


def scope_values(filters: Any) -> dict[str, list[str]]:
    """Scope ids a filter mentions as plain values (for the access log)."""
    found: dict[str, list[str]] = {}

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in SCOPE_FIELDS and isinstance(value, str | int) and value != WILDCARD:
                    found.setdefault(key, []).append(str(value))
                elif key in LOGICAL:
                    visit(value)

    visit(filters)
    return found


def _compile(node: dict[str, Any], depth: int) -> Q:
    if depth > MAX_DEPTH:
        raise FilterError(f"filters nest deeper than {MAX_DEPTH} levels.")
    # Conditions are gathered in lists and joined once: `q &= part` in a loop copies the tree
    # each time, which is quadratic in the number of conditions.
    conditions: list[Q] = []
    for key, value in node.items():
        if key in ("AND", "OR"):
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise FilterError(f"{key} takes a list of filter objects.")
            parts = [_compile(item, depth + 1) for item in value]
            if key == "OR":
                # OR of nothing is false; AND of nothing is no condition.
                conditions.append(Q(*parts, _connector=Q.OR) if parts else _nothing())
            elif parts:
                conditions.append(Q(*parts))
        elif key == "NOT":
            items = value if isinstance(value, list) else [value]
            if not items or not all(isinstance(v, dict) for v in items):
                raise FilterError("NOT takes a filter object (or a list of them).")
            conditions.append(~Q(*[_compile(item, depth + 1) for item in items]))
        elif key in FIELDS:
            conditions.append(FIELD_COMPILERS[key](key, value))
        else:
            raise FilterError(
                f"Unknown filter field {key!r}; allowed: {', '.join((*LOGICAL, *FIELDS))}."
            )
    # An empty Q means "no condition" to Django: OR would drop it and ~Q() is still empty.
    # An object with no conditions ({} or {"AND": []}) matches everything, so say so.
    conditions = [c for c in conditions if c]
    return Q(*conditions) if conditions else Q(pk__isnull=False)


def _nothing() -> Q:
    """The condition an impossible filter compiles to (an empty `in` list, OR of nothing): SQL
    false, which every reader runs as it is. Not Django's `pk__in=[]`: compiling that raises
    EmptyResultSet, which only the ORM's own evaluation of a queryset catches, and the readers
    that place the compiled SQL in statements of their own (search, the graph) would fail."""
    return Q(RawSQL("false", [], output_field=BooleanField()))


def _in(lookup: str, values: list[Any]) -> Q:
    return Q(**{lookup: values}) if values else _nothing()


def _operators(field: str, value: Any, allowed: tuple[str, ...]) -> list[tuple[str, Any]]:
    """Split {"op": v, ...} into (op, v) pairs; a bare value is ("eq", value)."""
    if isinstance(value, dict):
        if not value:
            raise FilterError(f"Filter on {field!r} is an empty object.")
        pairs = list(value.items())
    else:
        pairs = [("eq", value)]
    for op, _ in pairs:
        if op not in allowed:
            raise FilterError(
                f"Operator {op!r} is not allowed on {field!r}; allowed: {', '.join(allowed)}."
            )
    return pairs


def _as_list(field: str, op: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise FilterError(f"{field}.{op} takes a list.")
    return value


def _scope_value(field: str, value: Any) -> str:
    if (problem := scope_id_error(value)) is not None:
        raise FilterError(f"{field} {problem}")
    return str(value)


def _compile_scope(field: str, value: Any) -> Q:
    parts: list[Q] = []
    for op, operand in _operators(field, value, ("eq", "ne", "in")):
        if op == "eq" and operand == WILDCARD:
            parts.append(Q(**{f"{field}__isnull": False}))
        elif op == "eq":
            parts.append(Q(**{field: _scope_value(field, operand)}))
        elif op == "ne":
            parts.append(~Q(**{field: _scope_value(field, operand)}))
        else:
            values = [_scope_value(field, v) for v in _as_list(field, op, operand)]
            parts.append(_in(f"{field}__in", values))
    return Q(*parts)


def parse_moment(field: str, value: Any) -> datetime:
    """An ISO date or datetime (naive means UTC) as a UTC datetime; a date means its midnight.

    Refused with a FilterError: what is not ISO 8601, what looks like it but is no real date
    (2024-02-30, hour 25), and what falls outside years 1-9999 once moved to UTC.
    """
    if isinstance(value, str):
        try:
            moment = parse_datetime(value)
            if moment is None:
                day = parse_date(value)
                moment = datetime.combine(day, time.min) if day else None
            if moment is not None:
                if timezone.is_naive(moment):
                    moment = moment.replace(tzinfo=UTC)
                return moment.astimezone(UTC)
        except (ValueError, OverflowError):
            raise FilterError(
                f"{field}: {value[:40]!r} is not a real date and time in years 1-9999 (UTC)."
            ) from None
    raise FilterError(f"{field} needs an ISO 8601 date or datetime, got {str(value)[:40]!r}.")


def _time_operand(field: str, value: Any) -> date | datetime:
    moment = parse_moment(field, value)
    return moment.date() if field == "expiration_date" else moment


def _compile_time(field: str, value: Any) -> Q:
    if value == WILDCARD:
        return Q(**{f"{field}__isnull": False})
    parts: list[Q] = []
    ops = ("eq", "ne", "gt", "gte", "lt", "lte", "in")
    for op, operand in _operators(field, value, ops):
        if op == "in":
            moments = [_time_operand(field, v) for v in _as_list(field, op, operand)]
            parts.append(_in(f"{field}__in", moments))
        elif op == "ne":
            parts.append(~Q(**{field: _time_operand(field, operand)}))
        else:
            lookup = field if op == "eq" else f"{field}__{op}"
            parts.append(Q(**{lookup: _time_operand(field, operand)}))
    return Q(*parts)


def _category(value: Any) -> str:
    if not isinstance(value, str):
        raise FilterError("categories values must be strings.")
    return value.lower()


def _compile_categories(field: str, value: Any) -> Q:
    parts: list[Q] = []
    for op, operand in _operators(field, value, ("in", "contains")):
        if op == "in":
            wanted = [_category(v) for v in _as_list(field, op, operand)]
            parts.append(Q(categories__overlap=wanted))
        else:
            # Case-insensitive substring of any category (categories are stored lower-case).
            pattern = "%" + _escape_like(_category(operand)) + "%"
            exists = RawSQL(
                'EXISTS (SELECT 1 FROM unnest("memory_memory"."categories") AS c WHERE c LIKE %s)',
                [pattern],
                output_field=BooleanField(),
            )
            parts.append(Q(exists))
    return Q(*parts)


def _compile_metadata(field: str, value: Any) -> Q:
    if not isinstance(value, dict) or not value:
        raise FilterError('metadata takes an object of conditions, e.g. {"topic": "food"}.')
    parts: list[Q] = []
    for key, condition in value.items():
        if not key:
            raise FilterError("metadata keys must not be empty.")
        path = f"metadata.{key}"
        if condition == WILDCARD:
            parts.append(Q(metadata__has_key=key))
            continue
        for op, operand in _operators(path, condition, ("eq", "ne", "contains")):
            if op == "contains":
                if not isinstance(operand, str):
                    raise FilterError(f"{path}.contains takes a string.")
                # COALESCE: a missing key is false, never NULL, so NOT stays two-valued.
                text = RawSQL(
                    'COALESCE(("memory_memory"."metadata" ->> %s) LIKE %s, false)',
                    [key, "%" + _escape_like(operand) + "%"],
                    output_field=BooleanField(),
                )
                parts.append(Q(text))
            else:
                # JSON equality; key and JSON-encoded value are parameters, the key is always an
                # object key (never an array index), and a missing key is false, never NULL.
                try:
                    encoded = json.dumps(operand, allow_nan=False)
                except (TypeError, ValueError):
                    raise FilterError(f"{path} takes a JSON value.") from None
                equal = Q(
                    RawSQL(
                        'COALESCE(("memory_memory"."metadata" -> %s::text) = %s::jsonb, false)',
                        [key, encoded],
                        output_field=BooleanField(),
                    )
                )
                # "ne" keeps memories that lack the key, as Mem0 does.
                parts.append(equal if op == "eq" else ~equal)
    return Q(*parts)


def _compile_keywords(field: str, value: Any) -> Q:
    parts: list[Q] = []
    for op, operand in _operators(field, value, ("eq", "contains", "icontains")):
        if not isinstance(operand, str):
            raise FilterError("keywords takes a string.")
        lookup = "text__contains" if op == "contains" else "text__icontains"
        parts.append(Q(**{lookup: operand}))
    return Q(*parts)


def _compile_memory_ids(field: str, value: Any) -> Q:
    ids = value.get("in") if isinstance(value, dict) and set(value) == {"in"} else value
    if not isinstance(ids, list):
        raise FilterError('memory_ids takes a list of ids (or {"in": [...]}).')
    try:
        return _in("id__in", [uuid.UUID(str(v)) for v in ids])
    except ValueError:
        raise FilterError("memory_ids must be UUIDs.") from None


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


FIELD_COMPILERS: dict[str, Callable[[str, Any], Q]] = {
    **dict.fromkeys(SCOPE_FIELDS, _compile_scope),
    **dict.fromkeys(TIME_FIELDS, _compile_time),
    "categories": _compile_categories,
    "metadata": _compile_metadata,
    "keywords": _compile_keywords,
    "memory_ids": _compile_memory_ids,
}
