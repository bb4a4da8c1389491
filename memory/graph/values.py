"""The graph's values: names, scopes, entities, relations, and what a read across scopes matches.

Vertices (label Entity) carry: name (normalised), display_name, type, scope (a canonical key of
the four scope ids, what MATCH compares), user_id / agent_id / app_id / run_id ("" when unset,
for display), created_at (ISO 8601 UTC) and mentions. Edges (label RELATES; the relationship is
the `type` property, because a label would be DDL made from model text) carry: type, scope, the
four scope ids, valid, created_at, invalidated_at ("" while valid), memory_ids, event_id.
Edges are never deleted: a contradicted one gets valid = false and its invalidated_at.

Owns: the value types the other modules pass around (Scope, Entity, Relation, Traversal; for
the reads across scopes ScopeMatch and EdgeFilter), how entity names and relationships are
normalised, and the checks of paging arguments. No database access. Of engram, may import
memory.models only.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from memory.models import SCOPE_FIELDS, Memory

MAX_DEPTH = 3
MAX_LIMIT = 500
ANY_VALUE = "*"
_SPACES = re.compile(r"\s+")

ProjectId = uuid.UUID | str


# -- names -------------------------------------------------------------------------------------


def normalise_name(name: str) -> str:
    """Entity identity: lower-case, trimmed, runs of whitespace made one space."""
    return _SPACES.sub(" ", name).strip().lower()


def normalise_relationship(relationship: str) -> str:
    """Relationship type: lower-case, trimmed, runs of whitespace made one underscore."""
    return _SPACES.sub("_", relationship.strip()).lower()


def _entity_name(name: str) -> str:
    normalised = normalise_name(name)
    if not normalised:
        raise ValueError("an entity needs a non-blank name")
    return normalised


def _check_page(limit: int, offset: int = 0) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError("offset must be a non-negative integer")


# -- values ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """The four scope ids of a vertex or an edge; at least one is set."""

    user_id: str | None = None
    agent_id: str | None = None
    app_id: str | None = None
    run_id: str | None = None

    def __post_init__(self) -> None:
        if all(getattr(self, f) is None for f in SCOPE_FIELDS):
            raise ValueError("a graph scope needs at least one of " + ", ".join(SCOPE_FIELDS))

    @classmethod
    def of(cls, values: Mapping[str, str | None]) -> Scope:
        return cls(**{f: values.get(f) for f in SCOPE_FIELDS})

    @property
    def key(self) -> str:
        """What vertices and edges are matched on: one string, null distinct from ""."""
        return json.dumps([getattr(self, f) for f in SCOPE_FIELDS], ensure_ascii=False)

    def as_dict(self) -> dict[str, str | None]:
        return {f: getattr(self, f) for f in SCOPE_FIELDS}

    def properties(self) -> dict[str, str]:
        return {"scope": self.key} | {f: getattr(self, f) or "" for f in SCOPE_FIELDS}


def _exact_scope(scope: Scope) -> dict[str, Any]:
    """ORM filters for exactly this scope: each id equal, or unset."""
    filters: dict[str, Any] = {}
    for f, value in scope.as_dict().items():
        filters[f if value is not None else f"{f}__isnull"] = value if value is not None else True
    return filters


@dataclass(frozen=True)
class Entity:
    id: int
    name: str
    display_name: str
    type: str
    scope: dict[str, str | None]
    created_at: str
    mentions: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Entity:
        p = row["p"]
        return cls(
            id=int(row["id"]),
            name=p["name"],
            display_name=p.get("display_name", p["name"]),
            type=p.get("type", ""),
            scope=dict(zip(SCOPE_FIELDS, json.loads(p["scope"]), strict=True)),
            created_at=p.get("created_at", ""),
            mentions=int(p.get("mentions", 0)),
        )


@dataclass(frozen=True)
class Relation:
    id: int
    source: str
    relationship: str
    destination: str
    valid: bool
    created_at: str
    invalidated_at: str | None
    memory_ids: list[str]
    event_id: str | None
    scope: dict[str, str | None]
    source_id: int
    destination_id: int
    # What ended it: "retraction" (no active memory backs it), or "" (a contradiction, or valid).
    invalidated_by: str = ""
    # The wordings that asserted it before an edit ("<memory id>:<sha-256 of the old text>"): a
    # memory whose text becomes one of them again backs the edge again (retraction.rejoin_wording).
    reworded: list[str] = field(default_factory=list)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Relation:
        p = row["p"]
        return cls(
            id=int(row["id"]),
            source=row["src"],
            relationship=p["type"],
            destination=row["dst"],
            valid=bool(p["valid"]),
            created_at=p.get("created_at", ""),
            invalidated_at=p.get("invalidated_at") or None,
            memory_ids=list(p.get("memory_ids", [])),
            event_id=p.get("event_id") or None,
            scope=dict(zip(SCOPE_FIELDS, json.loads(p["scope"]), strict=True)),
            source_id=int(row["src_id"]),
            destination_id=int(row["dst_id"]),
            invalidated_by=p.get("invalidated_by") or "",
            reworded=list(p.get("reworded", [])),
        )

    def phrase(self) -> str:
        """The fact in one line, as the dashboards name it: "alice → lives_in → berlin"."""
        return f"{self.source} → {self.relationship} → {self.destination}"

    def reference(self) -> dict[str, Any]:
        """The edge as an event's record names it (its graph summary, a revert's answer)."""
        return {
            "id": self.id,
            "source": self.source,
            "relationship": self.relationship,
            "destination": self.destination,
        }


@dataclass(frozen=True)
class Traversal:
    nodes: list[Entity] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)


# -- what a read across scopes covers (memory.graph.filtered) ----------------------------------


@dataclass(frozen=True)
class ScopeMatch:
    """The scopes a read covers. Per scope id: a value it must equal, ANY_VALUE (set, to
    anything) or None (unset); an id not listed is not tested. At least one id has a value, so
    a read never spans the whole project."""

    ids: tuple[tuple[str, str | None], ...]

    def __post_init__(self) -> None:
        fields = [f for f, _ in self.ids]
        if len(set(fields)) != len(fields) or not set(fields) <= set(SCOPE_FIELDS):
            raise ValueError("a scope match lists each of " + ", ".join(SCOPE_FIELDS) + " once")
        if not any(v is not None and v != ANY_VALUE for _, v in self.ids):
            raise ValueError("a scope match needs at least one scope id with a value")

    @classmethod
    def of(cls, ids: Mapping[str, str | None]) -> ScopeMatch:
        return cls(tuple((f, ids[f]) for f in SCOPE_FIELDS if f in ids))


@dataclass(frozen=True)
class EdgeFilter:
    """Which edges a cross-scope read keeps: in `match`, valid unless include_invalid, and
    asserted by at least one memory of `backed_by` when given."""

    match: ScopeMatch
    include_invalid: bool = False
    backed_by: QuerySet[Memory] | None = None
