"""The project file of export_project / import_project: JSON Lines, one typed record a line.

Shared by the reader that writes it (memory.queries.transfer) and the action that loads it
(memory.actions.transfer): the format's name and version, the record types in the order a file
holds them, which model fields each record carries (and under which key), the reading of a file a
line at a time (a line's length capped), and the conversion of each value to JSON and back,
checked (a file is input: every value is checked for its field's type, length and choices, and
JSON and text by the API's rules of config.inputs, before it reaches a row). docs/moving.md
describes the format.

Of engram, imports memory.models and config.inputs only.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import uuid
import zlib
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from pgvector.django import VectorField

from config.inputs import MAX_JSON_DEPTH, UnsafeInputError, check_json, text_problem
from memory.models import (
    SCOPE_FIELDS,
    EntityVector,
    Feedback,
    Memory,
    MemoryEntity,
    MemoryEvent,
    MemoryHistory,
    ScopeSummary,
)

FORMAT = "engram-project"
VERSION = 1
VECTOR_ENCODING = "base64-float32-le"

# Record types, in the order a file holds them: each refers only to records before it (the
# graph first, since an add request's graph summary names its edges; a memory after the one
# that replaced it), so an import streams the file once and keeps only id maps of the graph.
ENTITY, RELATION, EVENT, MEMORY = "entity", "relation", "event", "memory"
HISTORY, FEEDBACK, SUMMARY = "history", "feedback", "summary"
ENTITY_LINK, ENTITY_VECTOR = "entity_link", "entity_vector"
RECORD_TYPES = (
    ENTITY,
    RELATION,
    EVENT,
    MEMORY,
    HISTORY,
    FEEDBACK,
    SUMMARY,
    ENTITY_LINK,
    ENTITY_VECTOR,
)
END = "end"

_SCOPE = tuple(SCOPE_FIELDS)
# The model and its fields (attnames) each relational record carries. Left out: generated
# columns (search_vector), what an import works out again from the text (a memory's language,
# as its embedding: memory.actions.transfer), the bigint ids of MemoryEntity and EntityVector
# (made again on import; their natural keys are unique), a running event's lease and claim
# token.
MODEL_FIELDS: dict[str, tuple[type[models.Model], tuple[str, ...]]] = {
    EVENT: (
        MemoryEvent,
        (
            "id",
            *_SCOPE,
            "status",
            "payload",
            "results",
            "graph",
            "error",
            "warning",
            "extractor",
            "attempts",
            "usage",
            "timings",
            "created_at",
            "started_at",
            "completed_at",
            "reverted_at",
            "reverted_by",
            "reversal",
        ),
    ),
    MEMORY: (
        Memory,
        (
            "id",
            *_SCOPE,
            "text",
            "hash",
            "embedding",
            "context_before",
            "context_after",
            "conversation_id",
            "seq",
            "metadata",
            "categories",
            "role",
            "actor_id",
            "created_at",
            "updated_at",
            "expiration_date",
            "structured_attributes",
            "state",
            "replaced_by_id",
            "immutable",
            "source_event_id",
            "source_positions",
        ),
    ),
    HISTORY: (
        MemoryHistory,
        (
            "id",
            "memory_id",
            *_SCOPE,
            "event",
            "old_memory",
            "new_memory",
            "actor",
            "event_id",
            "input",
            "metadata",
            "categories",
            "created_at",
        ),
    ),
    FEEDBACK: (
        Feedback,
        ("id", "memory_id", "feedback", "feedback_reason", "created_at"),
    ),
    SUMMARY: (ScopeSummary, ("id", *_SCOPE, "text", "updated_at")),
    ENTITY_LINK: (
        MemoryEntity,
        ("memory_id", *_SCOPE, "entity_name", "vertex_id", "created_at"),
    ),
    ENTITY_VECTOR: (EntityVector, (*_SCOPE, "entity_name", "embedding", "created_at")),
}
# A record's key for a field: its attname, but `replaced_by` for the supersession link.
_KEYS = {"replaced_by_id": "replaced_by"}
# Fields a record of an earlier engram may lack, and the value they then take.
_LATER_FIELDS: dict[str, Any] = {"warning": ""}


class FormatError(ValueError):
    """The file is not a valid project file (the message names the line and what is wrong)."""


def key_of(attname: str) -> str:
    return _KEYS.get(attname, attname)


# -- reading a file ----------------------------------------------------------------------------


def max_line_bytes() -> int:
    """The longest line a file may hold, in bytes (its newline left out). The longest record
    the API can make is an add request's (its event's payload is the request's body, at most
    ENGRAM_MAX_BODY_BYTES, beside its results) or its history's input, the body's messages:
    four bodies hold either."""
    return 4 * int(settings.ENGRAM_MAX_BODY_BYTES)


def open_file(path: Path) -> BinaryIO:
    """The file's bytes, gunzipped when its content is gzip (whatever its name)."""
    with path.open("rb") as raw:
        magic = raw.read(2)
    if magic == b"\x1f\x8b":
        return cast(BinaryIO, gzip.open(path, "rb"))
    return path.open("rb")


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line, a line at a time: no more than max_line_bytes() (and
    a buffer) of one line is ever read, so a file of one endless line costs no more memory
    than a valid one. FormatError: a line longer than that, one that is not UTF-8, a file that
    cannot be read (gzip cut short)."""
    cap = max_line_bytes()
    number = 0
    try:
        with open_file(path) as lines:
            while line := lines.readline(cap + 1):
                number += 1
                if len(line) > cap and not line.endswith(b"\n"):
                    raise FormatError(
                        f"line {number} is longer than {cap} bytes, more than any record holds"
                    )
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError:
                    raise FormatError(f"line {number} is not UTF-8 text") from None
                yield number, text
    except (OSError, EOFError, zlib.error) as error:
        raise FormatError(f"the file cannot be read after line {number} ({error})") from None


def parse_json(text: str, where: str) -> Any:
    """JSON from a line of a file; FormatError when it is not JSON or nests deeper than
    Python's parser goes (the depth the API takes is checked field by field: json_checked)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise FormatError(f"{where} nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:
        raise FormatError(f"{where} is not JSON") from None


def parse_record(number: int, text: str) -> dict[str, Any]:
    record = parse_json(text, f"line {number}")
    if not isinstance(record, dict):
        raise FormatError(f"line {number} is not a JSON object")
    return record


# -- vectors -----------------------------------------------------------------------------------


def encode_vector(vector: Any) -> str:
    """A vector as base64 of its float32 little-endian bytes (pgvector stores float32: exact)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: object, dimensions: int) -> list[float]:
    if not isinstance(text, str):
        raise FormatError("an embedding must be a base64 string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise FormatError("an embedding is not valid base64") from None
    if len(raw) != 4 * dimensions:
        raise FormatError(f"an embedding must have {dimensions} dimensions")
    values = np.frombuffer(raw, dtype="<f4")
    if not np.all(np.isfinite(values)):
        raise FormatError("an embedding holds a value that is not a finite number")
    return [float(v) for v in values]


# -- rows as records ---------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def record_of(kind: str, row: models.Model) -> dict[str, Any]:
    """The record of one row (embeddings encoded)."""
    _, fields = MODEL_FIELDS[kind]
    record: dict[str, Any] = {"type": kind}
    for attname in fields:
        value = getattr(row, attname)
        record[key_of(attname)] = encode_vector(value) if attname == "embedding" else to_json(value)
    return record


def row_values(
    kind: str, record: Mapping[str, Any], *, dimensions: int, vectors: bool = True
) -> dict[str, Any]:
    """The checked field values of a record, by attname (FormatError when one is wrong).
    `vectors=False`: the embedding is not read (an import that re-embeds)."""
    model, fields = MODEL_FIELDS[kind]
    values: dict[str, Any] = {}
    for attname in fields:
        key = key_of(attname)
        if key not in record and attname in _LATER_FIELDS:
            values[attname] = _LATER_FIELDS[attname]
            continue
        if key not in record:
            raise FormatError(f"a {kind} record needs {key!r}")
        field = _by_attname(model)[attname]
        if attname == "embedding":
            values[attname] = decode_vector(record[key], dimensions) if vectors else None
            continue
        if attname == "seq" and record[key] is None:
            values[attname] = None  # the target's next (memory.actions.transfer)
            continue
        try:
            values[attname] = _checked(field, record[key], f"{kind} {key}")
        except UnsafeInputError as error:  # says where itself
            raise FormatError(str(error).rstrip(".")) from None
        except (TypeError, ValueError, OverflowError) as error:
            raise FormatError(f"{kind} {key}: {error}") from None
    return values


def _by_attname(model: type[models.Model]) -> dict[str, models.Field[Any, Any]]:
    return {f.attname: f for f in model._meta.concrete_fields}


def _checked(field: models.Field[Any, Any], value: Any, where: str) -> Any:  # noqa: PLR0911, PLR0912 - one branch per field type
    if value is None:
        if not field.null:
            raise ValueError("must not be null")
        return None
    if isinstance(field, models.ForeignKey):
        return uuid.UUID(_text(value))
    if isinstance(field, models.UUIDField):
        return uuid.UUID(_text(value))
    if isinstance(field, models.DateTimeField):
        moment = datetime.fromisoformat(_text(value))
        if moment.tzinfo is None:
            raise ValueError("a time needs its UTC offset")
        try:
            # In UTC: a moment whose UTC date leaves years 1-9999 (the API refuses one:
            # check_observation_time), or an offset PostgreSQL does not take (past 15:59).
            return moment.astimezone(UTC)
        except OverflowError:
            raise ValueError("is outside years 1-9999 in UTC") from None
    if isinstance(field, models.DateField):
        return date.fromisoformat(_text(value))
    if isinstance(field, models.BooleanField):
        if not isinstance(value, bool):
            raise TypeError("must be true or false")
        return value
    if isinstance(field, models.IntegerField):  # BigInteger, PositiveSmallInteger too
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("must be an integer")
        low, high = _int_range(field)
        if not low <= value <= high:
            raise ValueError("is out of range")
        return value
    if isinstance(field, ArrayField):
        if not isinstance(value, list):
            raise TypeError("must be a list")
        return [_checked(field.base_field, item, where) for item in value]
    if isinstance(field, models.JSONField):
        return json_checked(value, where)
    if isinstance(field, models.CharField | models.TextField):
        text = _text(value)
        if (problem := text_problem(text)) is not None:
            raise ValueError(problem)
        if field.max_length is not None and len(text) > field.max_length:
            raise ValueError(f"must have at most {field.max_length} characters")
        if field.choices and text not in {str(c[0]) for c in field.choices}:
            raise ValueError(f"{text!r} is not one of the allowed values")
        return text
    if isinstance(field, VectorField):
        raise TypeError("a vector is read by decode_vector")
    raise TypeError(f"no reader for {type(field).__name__}")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("must be a string")
    return value


def json_checked(value: Any, where: str = "value") -> Any:
    """`value` if the API would take it as JSON (config.inputs.check_json: no NaN or infinity,
    no NUL character or lone surrogate, at most MAX_JSON_DEPTH levels deep and
    ENGRAM_MAX_JSON_NODES values); UnsafeInputError (a ValueError) naming `where` otherwise."""
    return check_json(value, where)


def _int_range(field: models.Field[Any, Any]) -> tuple[int, int]:
    if isinstance(field, models.PositiveSmallIntegerField):
        return 0, 32767
    if isinstance(field, models.PositiveIntegerField):
        return 0, 2**31 - 1
    if isinstance(field, models.BigIntegerField):
        return -(2**63), 2**63 - 1
    return -(2**31), 2**31 - 1
