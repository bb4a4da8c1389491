"""Storage of the graph: Cypher through AGE, parameters only, inside the tenant context.

Vertices (label Entity) carry: name (normalised), display_name, type, scope (a canonical key of
the four scope ids, what MATCH compares), user_id / agent_id / app_id / run_id ("" when unset,
for display), created_at (ISO 8601 UTC) and mentions. Edges (label RELATES; the relationship is
the `type` property, because a label would be DDL made from model text) carry: type, scope, the
four scope ids, valid, created_at, invalidated_at ("" while valid), memory_ids, event_id.
Edges are never deleted: a contradicted one gets valid = false and its invalidated_at.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, LiteralString

import psycopg
from django.db import connection
from django.db.models import QuerySet

from memory.models import SCOPE_FIELDS, EntityVector, Memory, MemoryEntity
from memory.text.embeddings import embed_words
from memory.text.recognise import known_names, mentions_self, recognise, self_entity
from tenants.db import project_context

ENTITY_LABEL = "Entity"
RELATION_LABEL = "RELATES"
MAX_DEPTH = 3
MAX_LIMIT = 500
_GRAPH_NAME = re.compile(r"g_[0-9a-f]{32}")
_SPACES = re.compile(r"\s+")

ProjectId = uuid.UUID | str


# -- names -------------------------------------------------------------------------------------


def graph_name(project: ProjectId) -> str:
    """The project's AGE graph: `g_` + the UUID's hex (also what engram_ensure_graph makes)."""
    name = "g_" + uuid.UUID(str(project)).hex
    return _checked(name)  # the only text ever formatted into a query


def _checked(graph: str) -> str:
    if not _GRAPH_NAME.fullmatch(graph):
        raise ValueError("not a graph name")
    return graph


def normalise_name(name: str) -> str:
    """Entity identity: lower-case, trimmed, runs of whitespace made one space."""
    return _SPACES.sub(" ", name).strip().lower()


def normalise_relationship(relationship: str) -> str:
    """Relationship type: lower-case, trimmed, runs of whitespace made one underscore."""
    return _SPACES.sub("_", relationship.strip()).lower()


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
        )


@dataclass(frozen=True)
class Traversal:
    nodes: list[Entity] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)


# -- Cypher ------------------------------------------------------------------------------------

_RELATION_OUT: LiteralString = (
    "{id: id(r), p: properties(r), src: a.name, dst: b.name, src_id: id(a), dst_id: id(b)}"
)

# The valid edges of a scope among these ids, locked (joined to an end: see _GATED).
_VALID_EDGES_BY_ID: LiteralString = """
SELECT r.id::text FROM {graph}."RELATES" r JOIN {graph}."Entity" s ON s.id = r.start_id
WHERE r.id = ANY(%s::ag_catalog.graphid[])
  AND r.properties OPERATOR(ag_catalog.@>) %s::text::ag_catalog.agtype
ORDER BY r.id FOR UPDATE OF r
"""
_INVALIDATE_BY_MATCH: LiteralString = (
    "MATCH (a:Entity)-[r:RELATES {scope: $scope, valid: true}]->(b:Entity) "
    "WHERE a.name = $src AND a.scope = $scope AND ($dst IS NULL OR b.name = $dst) "
    "AND ($type IS NULL OR r.type = $type) "
    "SET r.valid = false, r.invalidated_at = $now RETURN " + _RELATION_OUT
)
_LIST_RELATIONS: LiteralString = (
    "MATCH (a:Entity)-[r:RELATES {scope: $scope}]->(b:Entity) "
    "WHERE $include_invalid OR r.valid = true "
    "WITH a, r, b ORDER BY r.created_at, id(r) SKIP $offset LIMIT $limit "
    "RETURN " + _RELATION_OUT
)
# One step of a traversal: the valid (or all) edges of the scope touching the frontier, either
# way round, not yet seen. Plain SQL over the graph's label tables, not Cypher: AGE 1.5 compiles
# `id(x) IN $list` into an expression no index serves and scanned every edge of the scope per
# step; here the frontier meets the start_id / end_id indexes. Values are still parameters (the
# ids as a graphid[] literal of integers, the filter as an agtype map); row-level security
# applies as to any read.
_NEIGHBOURS_SQL: LiteralString = """
SELECT r.id::text, r.start_id::text, r.end_id::text,
       ag_catalog.agtype_out(r.properties)::text, ag_catalog.agtype_out(s.properties)::text,
       ag_catalog.agtype_out(e.properties)::text
FROM {graph}."RELATES" r
JOIN {graph}."Entity" s ON s.id = r.start_id
JOIN {graph}."Entity" e ON e.id = r.end_id
WHERE (r.start_id = ANY(%(frontier)s::ag_catalog.graphid[])
       OR r.end_id = ANY(%(frontier)s::ag_catalog.graphid[]))
  AND NOT r.id = ANY(%(seen)s::ag_catalog.graphid[])
  AND r.properties OPERATOR(ag_catalog.@>) %(filter)s::ag_catalog.agtype
ORDER BY r.id
LIMIT %(limit)s
"""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _cypher(graph: str, query: LiteralString, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Run one Cypher query returning one agtype map per row; values only as the parameter map.

    The statement is bound server-side (a plain psycopg cursor on Django's connection, in its
    transaction): AGE needs its third argument to be a real parameter, and Django's default
    client-side binding would inline it as a literal.
    """
    _checked(graph)
    if "$$" in query:
        raise ValueError("a Cypher query may not contain $$")
    statement = (
        f"SELECT * FROM ag_catalog.cypher('{graph}', $$ {query} $$, %s) "  # noqa: S608 - checked name
        "AS (v ag_catalog.agtype)"
    )
    connection.ensure_connection()
    raw = connection.connection
    if not isinstance(raw, psycopg.Connection):
        raise TypeError("the graph needs Django's psycopg 3 backend")
    with psycopg.Cursor(raw) as cursor:
        cursor.execute(statement, [json.dumps(params, ensure_ascii=False)])
        return [json.loads(row[0]) for row in cursor.fetchall()]


def ensure_graph(project: ProjectId) -> str:
    """Create the project's graph on first use (through the owner's function); its name.

    Must run in the project's tenant context. Also readies the session for cypher(): calling
    one of AGE's functions loads its library, whose parser hook cypher() needs (the app role
    may not run LOAD 'age', which is for superusers unless the library sits in
    $libdir/plugins), and ag_catalog joins the transaction's search_path (SET LOCAL).
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT engram_ensure_graph(%s), ag_catalog.agtype_in('null'), "
            # The SQL AGE generates names its operators (@>, ->) unqualified.
            "CASE WHEN 'ag_catalog' = ANY(current_schemas(false)) THEN '' ELSE "
            "set_config('search_path', current_setting('search_path') || ', ag_catalog', true) END",
            [str(project)],
        )
        row = cursor.fetchone()
    if row is None or row[0] != graph_name(project):
        raise RuntimeError("engram_ensure_graph returned another graph")
    return graph_name(project)


def _lock(*parts: str) -> None:
    """Serialise upserts of one entity or one edge (MERGE alone does not lock)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [json.dumps(parts, ensure_ascii=False)],
        )


def _lock_entities(graph: str, scope: Scope, names: Iterable[str]) -> None:
    """Take the upsert locks of several entities at once, in one global order (the lock keys
    sorted), before a transaction upserts them one by one: two transactions that each lock
    entities as they meet them (A then B, B then A) deadlock. _lock() again later is free (an
    advisory lock a transaction holds is granted to it again at once)."""
    keys = sorted(
        json.dumps([graph, "entity", normalised, scope.key], ensure_ascii=False)
        for normalised in {normalise_name(name) for name in names} - {""}
    )
    if keys:
        with connection.cursor() as cursor:
            cursor.execute(_LOCK_KEYS, [keys])


def lock_entities(project: ProjectId, scope: Scope, names: Iterable[str]) -> None:
    """The upsert locks of these entities of the scope, in the one order every writer uses;
    call it first in a transaction that will upsert several entities."""
    with project_context(project):
        _lock_entities(ensure_graph(project), scope, names)


def _check_page(limit: int, offset: int = 0) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError("offset must be a non-negative integer")


def _entity_name(name: str) -> str:
    normalised = normalise_name(name)
    if not normalised:
        raise ValueError("an entity needs a non-blank name")
    return normalised


# -- entities ----------------------------------------------------------------------------------


# Entity and edge writes are plain SQL on the label tables (the app role may INSERT and UPDATE
# them), not Cypher: the lookups meet the name and edge-end indexes (a one-table Cypher MATCH
# scans every entity of the project under row-level security, see the module's notes), and an
# INSERT or UPDATE is checked by the tables' WITH CHECK policies, which AGE's own CREATE skips.
_ENTITY_BY_NAME: LiteralString = """
SELECT n.id::text, ag_catalog.agtype_out(n.properties)::text
FROM {graph}."Entity" n JOIN {graph}."Entity" gate ON gate.id = n.id
WHERE ag_catalog.agtype_access_operator(VARIADIC ARRAY[n.properties, '"name"'::ag_catalog.agtype])
      = %s::text::ag_catalog.agtype
  AND ag_catalog.agtype_access_operator(VARIADIC ARRAY[n.properties, '"scope"'::ag_catalog.agtype])
      = %s::text::ag_catalog.agtype
ORDER BY n.id LIMIT 1
"""
_ENTITIES_BY_NAMES: LiteralString = """
SELECT n.id::text
FROM {graph}."Entity" n JOIN {graph}."Entity" gate ON gate.id = n.id
WHERE ag_catalog.agtype_access_operator(VARIADIC ARRAY[n.properties, '"name"'::ag_catalog.agtype])
      = ANY(%s::text[]::ag_catalog.agtype[])
  AND ag_catalog.agtype_access_operator(VARIADIC ARRAY[n.properties, '"scope"'::ag_catalog.agtype])
      = %s::text::ag_catalog.agtype
"""
_INSERT_ENTITY: LiteralString = """
INSERT INTO {graph}."Entity" (properties) VALUES (%s::text::ag_catalog.agtype)
RETURNING id::text, ag_catalog.agtype_out(properties)::text
"""
_PATCH_ENTITY: LiteralString = """
UPDATE {graph}."Entity" n
SET properties = n.properties OPERATOR(ag_catalog.||) %s::text::ag_catalog.agtype
WHERE n.id = %s::text::ag_catalog.graphid
RETURNING n.id::text, ag_catalog.agtype_out(n.properties)::text
"""
_EDGE_BETWEEN: LiteralString = """
SELECT r.id::text, r.start_id::text, r.end_id::text,
       ag_catalog.agtype_out(r.properties)::text, ag_catalog.agtype_out(s.properties)::text,
       ag_catalog.agtype_out(e.properties)::text
FROM {graph}."RELATES" r
JOIN {graph}."Entity" s ON s.id = r.start_id
JOIN {graph}."Entity" e ON e.id = r.end_id
WHERE r.start_id = %s::text::ag_catalog.graphid AND r.end_id = %s::text::ag_catalog.graphid
  AND r.properties OPERATOR(ag_catalog.@>) %s::text::ag_catalog.agtype
ORDER BY r.id LIMIT 1
"""
_INSERT_EDGE: LiteralString = """
INSERT INTO {graph}."RELATES" (start_id, end_id, properties)
VALUES (%s::text::ag_catalog.graphid, %s::text::ag_catalog.graphid, %s::text::ag_catalog.agtype)
RETURNING id::text
"""


def _entity_row(row: Sequence[Any]) -> Entity:
    return Entity.from_row({"id": row[0], "p": json.loads(row[1])})


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _find_entity(graph: str, scope: Scope, normalised: str) -> Entity | None:
    rows = _run(graph, _ENTITY_BY_NAME, [_json(normalised), _json(scope.key)])
    return _entity_row(rows[0]) if rows else None


def _upsert_entity(graph: str, scope: Scope, name: str, entity_type: str, increment: int) -> Entity:
    normalised = _entity_name(name)
    _lock(graph, "entity", normalised, scope.key)
    found = _find_entity(graph, scope, normalised)
    if found is not None:
        if not increment:
            return found
        patch = _json({"mentions": found.mentions + increment})
        return _entity_row(_run(graph, _PATCH_ENTITY, [patch, str(found.id)])[0])
    properties = {
        "name": normalised,
        "display_name": name.strip() or normalised,
        "type": normalise_name(entity_type),
        **scope.properties(),
        "created_at": _now(),
        "mentions": increment,
    }
    return _entity_row(_run(graph, _INSERT_ENTITY, [_json(properties)])[0])


def upsert_entity(
    project: ProjectId, scope: Scope, name: str, *, entity_type: str = "", mention: bool = True
) -> Entity:
    """The entity `name` of the scope, created if new; one more mention unless mention=False.

    Merged on (normalised name, scope); the first spelling stays its display name.
    """
    with project_context(project):
        graph = ensure_graph(project)
        return _upsert_entity(graph, scope, name, entity_type, 1 if mention else 0)


def find_entity(project: ProjectId, scope: Scope, name: str) -> Entity | None:
    with project_context(project):
        graph = ensure_graph(project)
        return _find_entity(graph, scope, _entity_name(name))


# -- relations ---------------------------------------------------------------------------------


def upsert_relation(
    project: ProjectId,
    source: str,
    relationship: str,
    destination: str,
    scope: Scope,
    *,
    memory_id: uuid.UUID | str | None = None,
    event_id: uuid.UUID | str | None = None,
    source_type: str = "",
    destination_type: str = "",
) -> Relation:
    """The valid edge (source)-[relationship]->(destination) of the scope, made if missing.

    A duplicate (same ends, type, scope, still valid) is merged: the memory id is appended to
    its memory_ids. The memory, when given, is also linked to both entities (MemoryEntity).
    """
    kind = normalise_relationship(relationship)
    if not kind:
        raise ValueError("a relation needs a non-blank relationship")
    with project_context(project):
        graph = ensure_graph(project)
        src = _upsert_entity(graph, scope, source, source_type, 0)
        dst = _upsert_entity(graph, scope, destination, destination_type, 0)
        if memory_id is not None:
            _link(
                graph,
                project,
                memory_id,
                [(source, source_type), (destination, destination_type)],
                scope,
            )
        _lock(graph, "relation", src.name, kind, dst.name, scope.key)
        wanted = _json({"type": kind, "scope": scope.key, "valid": True})
        found = _run(graph, _EDGE_BETWEEN, [str(src.id), str(dst.id), wanted])
        mid = None if memory_id is None else str(memory_id)
        if found:
            [(relation, _)] = _edge_rows(found)
            if mid is None or mid in relation.memory_ids:
                return relation
            [patched] = _patch_edges(
                graph, {relation.id: {"memory_ids": [*relation.memory_ids, mid]}}
            )
            return patched
        properties = {
            "type": kind,
            **scope.properties(),
            "valid": True,
            "created_at": _now(),
            "invalidated_at": "",
            "memory_ids": [] if mid is None else [mid],
            "event_id": "" if event_id is None else str(event_id),
        }
        [(edge_id,)] = _run(graph, _INSERT_EDGE, [str(src.id), str(dst.id), _json(properties)])
        return Relation.from_row({
            "id": edge_id, "p": properties, "src": src.name, "dst": dst.name,
            "src_id": src.id, "dst_id": dst.id,
        })  # fmt: skip


def invalidate_relations(
    project: ProjectId,
    scope: Scope,
    *,
    ids: Sequence[int] | None = None,
    source: str | None = None,
    relationship: str | None = None,
    destination: str | None = None,
) -> list[Relation]:
    """Mark valid edges of the scope invalid (valid=false, invalidated_at); never deletes.

    Either by edge ids, or by a match: a source, and optionally a relationship and a
    destination. Returns the edges it invalidated.
    """
    if (ids is None) == (source is None):
        raise ValueError(
            "give either edge ids or a source (with an optional relationship/destination)"
        )
    with project_context(project):
        graph = ensure_graph(project)
        params: dict[str, Any] = {"scope": scope.key, "now": _now()}
        if ids is not None:
            edge_ids = sorted({int(i) for i in ids})
            if not edge_ids:
                return []
            # By id through the primary key (a Cypher `id(r) IN $ids` scans the scope's edges).
            wanted = _json({"scope": scope.key, "valid": True})
            found = _run(graph, _VALID_EDGES_BY_ID, [_graphids(edge_ids), wanted])
            patch = {"valid": False, "invalidated_at": params["now"]}
            return _patch_edges(graph, {int(row[0]): patch for row in found})
        else:
            rows = _cypher(
                graph,
                _INVALIDATE_BY_MATCH,
                params
                | {
                    "src": _entity_name(source or ""),
                    "dst": None if destination is None else _entity_name(destination),
                    "type": None if relationship is None else normalise_relationship(relationship),
                },
            )
    return [Relation.from_row(row) for row in rows]


def relations(
    project: ProjectId,
    scope: Scope,
    *,
    include_invalid: bool = False,
    limit: int = 100,
    offset: int = 0,
) -> list[Relation]:
    """The scope's relations, oldest first, paged; valid ones only unless include_invalid."""
    _check_page(limit, offset)
    with project_context(project):
        graph = ensure_graph(project)
        rows = _cypher(
            graph,
            _LIST_RELATIONS,
            {
                "scope": scope.key,
                "include_invalid": bool(include_invalid),
                "limit": limit,
                "offset": offset,
            },
        )
    return [Relation.from_row(row) for row in rows]


def relations_touching(
    project: ProjectId,
    scope: Scope,
    names: Iterable[str],
    *,
    relationship: str | None = None,
    limit: int = 50,
) -> list[Relation]:
    """The scope's valid relations with an end among `names` (of this `relationship` only, when
    given), newest first, at most `limit` (1-MAX_LIMIT): what a new fact may contradict.

    The names are looked up once (a scan of the project's entities, see the module's notes on
    row-level security), then the edges come from the start_id / end_id indexes, as in a
    traversal step.
    """
    _check_page(limit)
    normalised = sorted({normalise_name(n) for n in names} - {""})
    if not normalised:
        return []
    with project_context(project):
        graph = ensure_graph(project)
        ids = _run(graph, _ENTITIES_BY_NAMES, [[_json(n) for n in normalised], _json(scope.key)])
        if not ids:
            return []
        wanted: dict[str, Any] = {"scope": scope.key, "valid": True}
        if relationship is not None:
            wanted["type"] = normalise_relationship(relationship)
        step = _Step(scope, [int(row[0]) for row in ids], [], False, limit)
        found = _neighbours(graph, step, wanted=wanted, newest_first=True)
    return [relation for relation, _ in found]


def traverse(
    project: ProjectId,
    scope: Scope,
    entity_name: str,
    *,
    depth: int = 1,
    limit: int = 50,
    include_invalid: bool = False,
) -> Traversal:
    """What the scope's graph links to `entity_name`, up to `depth` (1-3) hops either way.

    Breadth first, one query per hop over the indexed edge ends, stopping at `limit`
    relations (1-MAX_LIMIT). Nodes are the entities those relations touch, the start first.
    """
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be an integer from 1 to {MAX_DEPTH}")
    _check_page(limit)
    with project_context(project):
        graph = ensure_graph(project)
        root = _find_entity(graph, scope, _entity_name(entity_name))
        if root is None:
            return Traversal()
        nodes: dict[int, Entity] = {root.id: root}
        edges: dict[int, Relation] = {}
        frontier = [root.id]
        for _ in range(depth):
            if not frontier or len(edges) >= limit:
                break
            reached: list[int] = []
            step = _Step(scope, frontier, list(edges), include_invalid, limit - len(edges))
            for relation, ends in _neighbours(graph, step):
                edges[relation.id] = relation
                for end in ends:
                    if end.id not in nodes:
                        nodes[end.id] = end
                        reached.append(end.id)
            frontier = reached
    return Traversal(nodes=list(nodes.values()), relations=list(edges.values()))


@dataclass(frozen=True)
class _Step:
    scope: Scope
    frontier: list[int]
    seen: list[int]
    include_invalid: bool
    limit: int


def _graphids(ids: Iterable[int]) -> str:
    return "{" + ",".join(str(int(i)) for i in ids) + "}"


def _neighbours(
    graph: str,
    step: _Step,
    *,
    wanted: dict[str, Any] | None = None,
    newest_first: bool = False,
) -> list[tuple[Relation, tuple[Entity, Entity]]]:
    """The edges touching the frontier whose properties contain `wanted` (by default: the
    step's scope, and valid unless the step includes invalid ones)."""
    if wanted is None:
        wanted = {"scope": step.scope.key}
        if not step.include_invalid:
            wanted["valid"] = True
    statement = _NEIGHBOURS_SQL.replace("{graph}", _checked(graph))
    if newest_first:
        statement = statement.replace("ORDER BY r.id", "ORDER BY r.id DESC")
    with connection.cursor() as cursor:
        cursor.execute(
            statement,
            {
                "frontier": _graphids(step.frontier),
                "seen": _graphids(step.seen),
                "filter": json.dumps(wanted, ensure_ascii=False),
                "limit": step.limit,
            },
        )
        return _edge_rows(cursor.fetchall())


# -- the memory <-> entity index ---------------------------------------------------------------


def _link(
    graph: str,
    project: ProjectId,
    memory_id: uuid.UUID | str,
    entities: Iterable[tuple[str, str]],
    scope: Scope | None = None,
    *,
    remember: bool = True,
) -> list[Entity]:
    """Link the memory to the entities (vertices, MemoryEntity rows) and, unless the caller
    does it for many memories at once (remember=False), give new names their vectors."""
    memory = Memory.objects.only(*SCOPE_FIELDS).get(pk=memory_id, project_id=project)
    memory_scope = Scope.of(memory.scope)
    if scope is not None and scope != memory_scope:
        raise ValueError("the memory belongs to another scope")
    wanted: dict[str, tuple[str, str]] = {}
    for name, entity_type in entities:
        wanted.setdefault(_entity_name(name), (name, entity_type))
    known = set(
        MemoryEntity.objects.filter(memory_id=memory.pk, entity_name__in=list(wanted)).values_list(
            "entity_name", flat=True
        )
    )
    linked: list[Entity] = []
    rows: list[MemoryEntity] = []
    for normalised, (name, entity_type) in wanted.items():
        # A mention counts once per memory.
        entity = _upsert_entity(
            graph, memory_scope, name, entity_type, 0 if normalised in known else 1
        )
        linked.append(entity)
        if normalised not in known:
            rows.append(
                MemoryEntity(
                    project_id=project,
                    memory_id=memory.pk,
                    entity_name=normalised,
                    vertex_id=entity.id,
                    **memory_scope.as_dict(),
                )
            )
    MemoryEntity.objects.bulk_create(rows, ignore_conflicts=True)
    if remember:
        _remember_names(project, memory_scope, [row.entity_name for row in rows])
    return linked


def _remember_names(project: ProjectId, scope: Scope, names: Sequence[str]) -> None:
    """Give each of the scope's entity `names` its vector (EntityVector) if it has none yet:
    search matches query words against them by meaning. The missing ones are embedded in one
    batch; a concurrent writer of the same name is ignored (the same name, the same vector)."""
    if not names:
        return
    filters = _exact_scope(scope)
    have = set(
        EntityVector.objects.filter(
            project_id=project, entity_name__in=names, **filters
        ).values_list("entity_name", flat=True)
    )
    missing = sorted(set(names) - have)
    if not missing:
        return
    vectors = embed_words(missing)  # a one-word name may be precomputed
    EntityVector.objects.bulk_create(
        [
            EntityVector(project_id=project, entity_name=name, embedding=vector, **scope.as_dict())
            for name, vector in zip(missing, vectors, strict=True)
        ],
        ignore_conflicts=True,
    )


def embed_entity_names(project: ProjectId, chunk: int = 500) -> int:
    """Give every entity name of the project that has links but no vector (linked before
    EntityVector existed) its vector; returns how many were made. Safe to run again."""
    with project_context(project):
        linked = set(
            MemoryEntity.objects.filter(project_id=project)
            .values_list(*SCOPE_FIELDS, "entity_name")
            .distinct()
        )
        have = set(
            EntityVector.objects.filter(project_id=project).values_list(
                *SCOPE_FIELDS, "entity_name"
            )
        )
    by_scope: dict[Scope, list[str]] = {}
    for *ids, name in sorted(linked - have, key=str):
        by_scope.setdefault(Scope.of(dict(zip(SCOPE_FIELDS, ids, strict=True))), []).append(name)
    for scope, names in by_scope.items():
        for start in range(0, len(names), chunk):
            with project_context(project):
                _remember_names(project, scope, names[start : start + chunk])
    return sum(len(names) for names in by_scope.values())


def _exact_scope(scope: Scope) -> dict[str, Any]:
    """ORM filters for exactly this scope: each id equal, or unset."""
    filters: dict[str, Any] = {}
    for f, value in scope.as_dict().items():
        filters[f if value is not None else f"{f}__isnull"] = value if value is not None else True
    return filters


def link_memory(
    project: ProjectId,
    memory_id: uuid.UUID | str,
    entities: Iterable[str | tuple[str, str]],
) -> list[Entity]:
    """Record that the memory mentions these entities (names, or (name, type) pairs).

    In one transaction: each entity's vertex in the memory's scope (created, or one more
    mention the first time this memory names it) and the MemoryEntity rows.
    """
    pairs = [(e, "") if isinstance(e, str) else e for e in entities]
    with project_context(project):
        graph = ensure_graph(project)
        return _link(graph, project, memory_id, pairs)


def memory_ids_for_entities(
    project: ProjectId, scope: Scope, names: Iterable[str]
) -> list[uuid.UUID]:
    """Ids of the memories of exactly this scope linked to any of these entity names."""
    normalised = sorted({normalise_name(n) for n in names} - {""})
    if not normalised:
        return []
    filters = _exact_scope(scope)
    with project_context(project):
        return list(
            MemoryEntity.objects.filter(project_id=project, entity_name__in=normalised, **filters)
            .values_list("memory_id", flat=True)
            .distinct()
        )


# -- entity linking by the local recogniser ----------------------------------------------------

# The scope's known entity names handed to the recogniser: at most this many (newest links).
MAX_KNOWN_NAMES = 5_000
# Memories linked per transaction by link_mentions.
LINK_CHUNK = 50


def link_mentions(project: ProjectId, memory_ids: Iterable[uuid.UUID | str]) -> int:
    """Link each active memory of `memory_ids` to the entities the local recogniser finds in it
    (memory.text.recognise): its proper nouns, titles, acronyms, the scope's already known
    entity names, and for a user's first-person text the scope's self entity. Returns how many
    new links were made.

    Safe to run again: links a memory already has are skipped before any Cypher runs, so a
    re-run writes nothing and no mention is counted twice. One transaction per LINK_CHUNK
    memories, the chunk's entities all locked first in one key order (_lock_entities), so
    concurrent jobs of one scope neither hold locks long nor deadlock; a memory deleted
    meanwhile is skipped. The known names are read from MemoryEntity, not AGE (one indexed query
    per scope).
    """
    ids = [str(uuid.UUID(str(m))) for m in memory_ids]
    with project_context(project):
        memories = list(
            Memory.objects.filter(project_id=project, pk__in=ids, state=Memory.State.ACTIVE)
            .only("id", "text", "role", *SCOPE_FIELDS)
            .order_by("created_at", "id")
        )
        linked: set[tuple[uuid.UUID, str]] = set(
            MemoryEntity.objects.filter(memory_id__in=[m.pk for m in memories]).values_list(
                "memory_id", "entity_name"
            )
        )
    by_scope: dict[Scope, list[Memory]] = {}
    for memory in memories:
        by_scope.setdefault(Scope.of(memory.scope), []).append(memory)
    work: list[tuple[Memory, Scope, list[tuple[str, str]]]] = []
    for scope, rows in by_scope.items():
        with project_context(project):
            known = known_names(_scope_entity_names(project, scope))
        # First the names the batch itself introduces, so its texts are linked alike whatever
        # their order ("Berlin is cold" after "Jon moved to Berlin" names Berlin too).
        for memory in rows:
            for name, _ in recognise(memory.text, known):
                known.setdefault(normalise_name(name), name)
        me = self_entity(scope.as_dict())
        for memory in rows:
            found = recognise(memory.text, known)
            if me and memory.role in ("user", "") and mentions_self(memory.text):
                found.append((me, "person"))
            new = {
                key: pair
                for key, pair in ((normalise_name(n), (n, t)) for n, t in found)
                if (memory.pk, key) not in linked
            }
            if new:
                work.append((memory, scope, [new[key] for key in sorted(new)]))
    made = 0
    for start in range(0, len(work), LINK_CHUNK):
        chunk = work[start : start + LINK_CHUNK]
        with project_context(project):
            graph = ensure_graph(project)
            for scope in {scope for _, scope, _ in chunk}:
                names = [name for _, s, pairs in chunk if s == scope for name, _ in pairs]
                _lock_entities(graph, scope, names)
            linked_names: dict[Scope, set[str]] = {}
            for memory, scope, pairs in chunk:
                try:  # the memory is read first: nothing is written when it is gone
                    _link(graph, project, memory.pk, pairs, scope, remember=False)
                except Memory.DoesNotExist:
                    continue  # erased since the job was queued
                made += len(pairs)
                linked_names.setdefault(scope, set()).update(normalise_name(n) for n, _ in pairs)
            for scope, new_names in linked_names.items():  # the chunk's new names, one batch
                _remember_names(project, scope, sorted(new_names))
    return made


def _scope_entity_names(project: ProjectId, scope: Scope) -> list[str]:
    filters = _exact_scope(scope)
    names = (
        MemoryEntity.objects.filter(project_id=project, **filters)
        .order_by("-id")
        .values_list("entity_name", flat=True)[:MAX_KNOWN_NAMES]
    )
    return list(dict.fromkeys(names))


# -- reads across scopes (the HTTP API) --------------------------------------------------------
#
# The readers above take one exact scope (its key). The API reads the way search filters
# (memory.retrieval.filters): each id the filter names must match, "*" accepts any set value,
# an id it leaves out must be unset. ScopeMatch says that for the four id properties every
# vertex and edge carries ("" when unset), and the SQL below tests it by agtype containment
# (@>) on the label tables, values as parameters; only the checked graph name and fixed aliases
# are formatted in. A read may also keep only the relations asserted by at least one memory of
# a queryset (the caller's other filters), tested against the edge's memory_ids.

ANY_VALUE = "*"

_EDGE_COLUMNS: LiteralString = """
SELECT r.id::text, r.start_id::text, r.end_id::text,
       ag_catalog.agtype_out(r.properties)::text, ag_catalog.agtype_out(s.properties)::text,
       ag_catalog.agtype_out(e.properties)::text
FROM {graph}."RELATES" r
JOIN {graph}."Entity" s ON s.id = r.start_id
JOIN {graph}."Entity" e ON e.id = r.end_id
"""
_CONTAINS: LiteralString = " {alias}.properties OPERATOR(ag_catalog.@>) %s::ag_catalog.agtype"
# The edges with a join: alone, a table's policy test stays in the scan filter before the
# (non-leakproof) agtype @>, so the property index is never used and every edge of the project
# is read; in a join the policy becomes a one-time filter and the GIN index finds the scope's
# edges (5 users x 2,000 edges: the scope's 2,000 rows, not the project's 10,000).
_GATED: LiteralString = '{graph}."RELATES" r JOIN {graph}."Entity" gate ON gate.id = r.start_id'
_MEMORY_IDS: LiteralString = (
    "jsonb_array_elements_text(ag_catalog.agtype_out(r.properties)::text::jsonb -> 'memory_ids')"
)


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


def _where_match(
    alias: LiteralString, match: ScopeMatch, params: list[Any], extra: Mapping[str, Any]
) -> str:
    """SQL testing the row `alias` against the match and `extra` properties (parameters)."""
    equal = {f: v or "" for f, v in match.ids if v != ANY_VALUE} | dict(extra)
    params.append(json.dumps(equal, ensure_ascii=False))
    sql = _CONTAINS.replace("{alias}", alias)
    for f, v in match.ids:
        if v == ANY_VALUE:
            params.append(json.dumps({f: ""}))
            sql += " AND NOT" + _CONTAINS.replace("{alias}", alias)
    return sql


def _where_edge(edges: EdgeFilter, params: list[Any]) -> str:
    sql = _where_match("r", edges.match, params, {} if edges.include_invalid else {"valid": True})
    if edges.backed_by is not None:
        sub, sub_params = edges.backed_by.values("id").query.sql_with_params()
        # Django's own SQL for the queryset, its values as parameters.
        sql += (
            f" AND EXISTS (SELECT 1 FROM {_MEMORY_IDS} AS backing(id) WHERE backing.id IN "  # noqa: S608
            f"(SELECT backed.id::text FROM ({sub}) AS backed))"
        )
        params.extend(sub_params)
    return sql


def _run(graph: str, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement.replace("{graph}", _checked(graph)), params)
        return list(cursor.fetchall())


def _edge_rows(rows: Iterable[Sequence[Any]]) -> list[tuple[Relation, tuple[Entity, Entity]]]:
    found = []
    for edge_id, start_id, end_id, props, start_props, end_props, *_ in rows:
        source = Entity.from_row({"id": start_id, "p": json.loads(start_props)})
        destination = Entity.from_row({"id": end_id, "p": json.loads(end_props)})
        relation = Relation.from_row(
            {
                "id": edge_id,
                "p": json.loads(props),
                "src": source.name,
                "dst": destination.name,
                "src_id": start_id,
                "dst_id": end_id,
            }
        )
        found.append((relation, (source, destination)))
    return found


def relations_in(
    project: ProjectId, edges: EdgeFilter, *, limit: int = 100, offset: int = 0
) -> list[Relation]:
    """The relations of the matched scopes, oldest first (creation order, by edge id), paged."""
    _check_page(limit, offset)
    params: list[Any] = []
    # The page's edges first, then their ends: joining both ends before the LIMIT looked up
    # two vertices per edge of the scope (10,000 edges: 50 ms a page).
    where = _where_edge(edges, params)
    page = f"SELECT r.* FROM {_GATED} WHERE {where} ORDER BY r.id LIMIT %s OFFSET %s"  # noqa: S608
    statement = _EDGE_COLUMNS.replace('{graph}."RELATES" r', f"({page}) r") + "ORDER BY r.id"
    with project_context(project):
        graph = ensure_graph(project)
        rows = _run(graph, statement, [*params, limit, offset])
    return [relation for relation, _ in _edge_rows(rows)]


def count_relations_in(project: ProjectId, edges: EdgeFilter) -> int:
    """How many relations relations_in pages through."""
    params: list[Any] = []
    where = _where_edge(edges, params)
    statement = f"SELECT count(*) FROM {_GATED} WHERE {where}"  # noqa: S608 - parameters
    with project_context(project):
        graph = ensure_graph(project)
        return int(_run(graph, statement, params)[0][0])


def _entities_in(graph: str, match: ScopeMatch, names: Sequence[str]) -> list[Entity]:
    """The matched scopes' entities of these normalised names (one per scope and name)."""
    if not names:
        return []
    params: list[Any] = []
    statement = (
        # Joined to itself for the same reason as _GATED: then the name index serves.
        'SELECT n.id::text, ag_catalog.agtype_out(n.properties)::text FROM {graph}."Entity" n '
        'JOIN {graph}."Entity" gate ON gate.id = n.id '
        "WHERE ag_catalog.agtype_access_operator(VARIADIC ARRAY[n.properties, "
        "'\"name\"'::ag_catalog.agtype]) = ANY(%s::text[]::ag_catalog.agtype[]) AND "
    )
    params.append([json.dumps(name, ensure_ascii=False) for name in names])
    statement += _where_match("n", match, params, {}) + " ORDER BY n.id LIMIT %s"
    params.append(MAX_LIMIT)
    rows = _run(graph, statement, params)
    return [Entity.from_row({"id": i, "p": json.loads(p)}) for i, p in rows]


def traverse_in(
    project: ProjectId,
    edges: EdgeFilter,
    entity_name: str,
    *,
    depth: int = 1,
    limit: int = 50,
) -> Traversal:
    """Like traverse, over the matched scopes: from every entity named `entity_name` in them
    (one per scope), breadth first over the edges the filter keeps, up to `depth` (1-3) hops
    either way and `limit` relations. Nodes: the start entities first, then as reached."""
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be an integer from 1 to {MAX_DEPTH}")
    _check_page(limit)
    with project_context(project):
        graph = ensure_graph(project)
        roots = _entities_in(graph, edges.match, [_entity_name(entity_name)])
        nodes: dict[int, Entity] = {root.id: root for root in roots}
        found: dict[int, Relation] = {}
        frontier = list(nodes)
        for _ in range(depth):
            if not frontier or len(found) >= limit:
                break
            reached: list[int] = []
            params: list[Any] = [_graphids(frontier), _graphids(frontier), _graphids(found)]
            statement = (
                _EDGE_COLUMNS + "WHERE (r.start_id = ANY(%s::ag_catalog.graphid[]) "
                "OR r.end_id = ANY(%s::ag_catalog.graphid[])) "
                "AND NOT r.id = ANY(%s::ag_catalog.graphid[]) AND " + _where_edge(edges, params)
            )
            statement += " ORDER BY r.id LIMIT %s"
            for relation, ends in _edge_rows(_run(graph, statement, [*params, limit - len(found)])):
                found[relation.id] = relation
                for end in ends:
                    if end.id not in nodes:
                        nodes[end.id] = end
                        reached.append(end.id)
            frontier = reached
    return Traversal(nodes=list(nodes.values()), relations=list(found.values()))


def relations_of_memories(
    project: ProjectId, memory_ids: Sequence[uuid.UUID | str], *, limit: int = 20
) -> list[Relation]:
    """Valid relations asserted by any of these memories, best first: ordered by the position
    in `memory_ids` (a ranking) of the first of them each relation names, then creation.

    Found from the memories' MemoryEntity rows (their entities' vertices) along the edge ends,
    so the edges of unrelated entities are never read. An edge is in its memory's scope (the
    store links a memory only to its own scope's vertices), so no scope test is needed.
    """
    _check_page(limit)
    ranked = [str(m) for m in memory_ids]
    if not ranked:
        return []
    with project_context(project):
        graph = ensure_graph(project)
        links = MemoryEntity.objects.filter(project_id=project, memory_id__in=ranked)
        vertices = sorted({v for v in links.values_list("vertex_id", flat=True) if v is not None})
        if not vertices:
            return []
        statement = (
            _EDGE_COLUMNS + ", LATERAL (SELECT min(array_position(%s::text[], backing.id)) "  # noqa: S608
            "AS best FROM " + _MEMORY_IDS + " AS backing(id)) rank "
            "WHERE (r.start_id = ANY(%s::ag_catalog.graphid[]) "
            "OR r.end_id = ANY(%s::ag_catalog.graphid[])) "
            # Not `properties @> {valid: true}`: the planner would take the property index,
            # which finds nearly every edge, over the edge ends' (10k edges: 16 ms, not 2).
            "AND ag_catalog.agtype_access_operator(VARIADIC ARRAY[r.properties, "
            "'\"valid\"'::ag_catalog.agtype]) = 'true'::ag_catalog.agtype "
            "AND rank.best IS NOT NULL ORDER BY rank.best, r.id LIMIT %s"
        )
        ids = _graphids(vertices)
        rows = _run(graph, statement, [ranked, ids, ids, limit])
    return [relation for relation, _ in _edge_rows(rows)]


def relations_touching_in(
    project: ProjectId, edges: EdgeFilter, names: Iterable[str], *, limit: int = 20
) -> list[Relation]:
    """Relations the filter keeps that touch an entity of one of these names (normalised) in
    the matched scopes, oldest first."""
    _check_page(limit)
    wanted = sorted({normalise_name(n) for n in names} - {""})
    with project_context(project):
        graph = ensure_graph(project)
        ends = _entities_in(graph, edges.match, wanted)
        if not ends:
            return []
        ids = _graphids(end.id for end in ends)
        params: list[Any] = [ids, ids]
        statement = (
            _EDGE_COLUMNS + "WHERE (r.start_id = ANY(%s::ag_catalog.graphid[]) "
            "OR r.end_id = ANY(%s::ag_catalog.graphid[])) AND " + _where_edge(edges, params)
        )
        rows = _run(graph, statement + " ORDER BY r.id LIMIT %s", [*params, limit])
    return [relation for relation, _ in _edge_rows(rows)]


# -- retraction: relations follow the memories behind them -------------------------------------
#
# An edge holds while an active memory asserts it (its memory_ids). The memory actions call
# these in their own transaction, so every caller gets them: deleting, superseding or
# rewording memories retracts them (retract_memories); restoring a deleted memory reinstates
# it (reinstate_memories).
#
# - Retraction: each valid edge citing a retracted memory and backed by no other active memory
#   is invalidated (valid=false, invalidated_at, invalidated_by="retraction"; kept as history,
#   never erased); an edge another active memory backs stays valid. A reworded memory (its text
#   changed) also leaves the edges' memory_ids: its new text no longer asserts what the old
#   one did, so it must not keep an edge alive later nor bring one back on a restore.
# - Reinstatement: each edge invalidated by retraction that cites a restored memory is valid
#   again, unless the same relation (same ends, type and scope) has a valid edge by now; then
#   the memory joins that edge's memory_ids. Edges invalidated by a contradiction
#   (invalidate_relations: no invalidated_by) are never re-validated, and a restore does not
#   re-check contradictions.
# - Cost. A memory with no MemoryEntity row has no edge (upsert_relation links the memory an
#   edge cites to both its ends): one indexed query, and the graph is neither read nor created.
#   Otherwise SQL over the label tables, each statement joined to the Entity table so that
#   row-level security's test becomes a one-time filter and the indexes serve (see the
#   package docstring): edges found by containment of the memory id in memory_ids (the
#   relates_props GIN index), re-read and updated by id (relates_id).
# - Concurrency. The edges are locked as upsert_relation locks one (its advisory key, taken in
#   key order), re-read FOR UPDATE, and only then are their other memories' states read: two
#   transactions retracting the two backers of one edge serialise, and the second sees the
#   first's deletion; an upsert of the same relation waits for the retraction.
# - Writes are plain SQL UPDATEs merging the changed properties (agtype ||), so the WITH
#   CHECK policy of the graph's tables applies to them, unlike AGE's own SET.

RETRACTION = "retraction"
_CITING_CHUNK = 200  # memory ids per statement: one GIN containment test each

_CITED: LiteralString = """
SELECT engram_current_project() IS NOT DISTINCT FROM %(project)s::uuid,
       ARRAY(SELECT DISTINCT l.memory_id::text FROM memory_memoryentity l
             WHERE l.project_id = %(project)s::uuid AND l.memory_id = ANY(%(ids)s::uuid[])
               AND to_regnamespace(%(graph)s) IS NOT NULL
             ORDER BY 1)
"""
_CITES: LiteralString = "r.properties OPERATOR(ag_catalog.@>) %s::ag_catalog.agtype"
_LOCK_KEYS: LiteralString = (
    "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest(%s::text[]) AS k"
)
_LOCKED_EDGES: LiteralString = (
    _EDGE_COLUMNS + "WHERE r.id = ANY(%s::ag_catalog.graphid[]) AND " + _CITES + " "
    "ORDER BY r.id FOR UPDATE OF r"
)
_VALID_TWINS: LiteralString = (
    _EDGE_COLUMNS + "WHERE r.start_id = ANY(%s::ag_catalog.graphid[]) "
    "AND r.end_id = ANY(%s::ag_catalog.graphid[]) "
    "AND r.properties OPERATOR(ag_catalog.@>) '{\"valid\": true}'::ag_catalog.agtype "
    "ORDER BY r.id FOR UPDATE OF r"
)
_PATCH_EDGES: LiteralString = """
UPDATE {graph}."RELATES" r
SET properties = r.properties OPERATOR(ag_catalog.||) v.patch::ag_catalog.agtype
FROM {graph}."Entity" s, {graph}."Entity" e,
     unnest(%s::ag_catalog.graphid[], %s::text[]) AS v(id, patch)
WHERE s.id = r.start_id AND e.id = r.end_id AND r.id = v.id
RETURNING r.id::text, r.start_id::text, r.end_id::text,
          ag_catalog.agtype_out(r.properties)::text, ag_catalog.agtype_out(s.properties)::text,
          ag_catalog.agtype_out(e.properties)::text
"""


def retract_memories(
    project: ProjectId, memory_ids: Iterable[uuid.UUID | str], *, reworded: bool = False
) -> list[Relation]:
    """These memories no longer assert their relations (deleted or superseded; with
    `reworded`, their text changed): invalidate the valid edges citing them that no other
    active memory backs. Returns those edges, now invalid. See the section comment above."""
    ids = _memory_keys(memory_ids)
    cited = _cited(project, ids)
    if not cited:
        return []
    with project_context(project):
        graph = ensure_graph(project)
        gone = set(ids)
        valid = {"valid": True}
        edges = [
            e
            for e in _lock_edges(graph, _edges_citing(graph, cited, valid), valid)
            if gone.intersection(e.memory_ids)
        ]
        backers = _active(project, {m for e in edges for m in e.memory_ids} - gone)
        now = _now()
        patches: dict[int, dict[str, Any]] = {}
        for edge in edges:
            patch: dict[str, Any] = {}
            if reworded:
                patch["memory_ids"] = [m for m in edge.memory_ids if m not in gone]
            if not backers.intersection(edge.memory_ids):
                patch |= {"valid": False, "invalidated_at": now, "invalidated_by": RETRACTION}
            if patch:
                patches[edge.id] = patch
        changed = _patch_edges(graph, patches)
    return [r for r in changed if not r.valid]


def reinstate_memories(project: ProjectId, memory_ids: Iterable[uuid.UUID | str]) -> list[Relation]:
    """These memories are active again (a deleted memory restored): each edge invalidated by
    retraction that one of them backs is valid again, or, when the same relation has a valid
    edge by now, they join that edge's memory_ids. Returns the edges they now back that
    changed (re-validated or merged into)."""
    ids = _memory_keys(memory_ids)
    cited = _cited(project, ids)
    if not cited:
        return []
    with project_context(project):
        graph = ensure_graph(project)
        retracted = {"valid": False, "invalidated_by": RETRACTION}
        back = _active(project, cited)
        edges = [
            e
            for e in _lock_edges(graph, _edges_citing(graph, cited, retracted), retracted)
            if back.intersection(e.memory_ids)
        ]
        if not edges:
            return []
        twins = _valid_twins(graph, edges)
        backing = {twin.id: list(twin.memory_ids) for twin in twins.values()}
        patches: dict[int, dict[str, Any]] = {}
        for edge in edges:  # in id order: the oldest edge of a relation comes back first
            key = _relation_key(edge)
            twin = twins.get(key)
            if twin is None:
                patches[edge.id] = {"valid": True, "invalidated_at": "", "invalidated_by": ""}
                twins[key], backing[edge.id] = edge, list(edge.memory_ids)
                continue
            joining = [m for m in edge.memory_ids if m in back and m not in backing[twin.id]]
            if joining:
                backing[twin.id] += joining
                patches.setdefault(twin.id, {})["memory_ids"] = backing[twin.id]
        return _patch_edges(graph, patches)


def _memory_keys(memory_ids: Iterable[uuid.UUID | str]) -> list[str]:
    """Memory ids as edges cite them (str of the UUID), sorted, once each."""
    return sorted({str(uuid.UUID(str(m))) for m in memory_ids})


def _cited(project: ProjectId, ids: Sequence[str]) -> list[str]:
    """Those of `ids` that have graph presence (MemoryEntity rows, in a project whose graph
    exists): only they can be cited by an edge.

    The check of every delete and update, so one round trip: in the caller's transaction when
    its tenant is the project (the memory actions'), else in a context of its own.
    """
    if not ids:
        return []
    params: dict[str, Any] = {
        "project": str(project),
        "ids": list(ids),
        "graph": graph_name(project),
    }
    if connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute(_CITED, params)
            row = cursor.fetchone()
        if row is not None and row[0]:
            return list(row[1])
    with project_context(project), connection.cursor() as cursor:
        cursor.execute(_CITED, params)
        row = cursor.fetchone()
    return [] if row is None else list(row[1])


def _active(project: ProjectId, ids: Iterable[str]) -> set[str]:
    """Those of `ids` that are active memories of the project (read after the edges' locks)."""
    wanted = []
    for value in ids:
        try:
            wanted.append(uuid.UUID(value))
        except ValueError:
            continue  # not a memory id: backs nothing
    if not wanted:
        return set()
    rows = Memory.objects.filter(project_id=project, pk__in=wanted, state=Memory.State.ACTIVE)
    return {str(pk) for pk in rows.values_list("pk", flat=True)}


def _edges_citing(graph: str, ids: Sequence[str], state: Mapping[str, Any]) -> list[Relation]:
    """The edges in `state` (a property map they contain) whose memory_ids cite any of `ids`."""
    found: dict[int, Relation] = {}
    for start in range(0, len(ids), _CITING_CHUNK):
        chunk = ids[start : start + _CITING_CHUNK]
        tests = " OR ".join([_CITES] * len(chunk))
        params = [json.dumps({**state, "memory_ids": [m]}) for m in chunk]
        rows = _run(graph, _EDGE_COLUMNS + "WHERE (" + tests + ") ORDER BY r.id", params)
        found.update((relation.id, relation) for relation, _ in _edge_rows(rows))
    return [found[i] for i in sorted(found)]


def _relation_key(edge: Relation) -> tuple[int, int, str, str]:
    return (edge.source_id, edge.destination_id, edge.relationship, Scope.of(edge.scope).key)


def _lock_edges(graph: str, edges: Sequence[Relation], state: Mapping[str, Any]) -> list[Relation]:
    """Lock the edges as upsert_relation locks one (the same advisory keys, in key order), then
    re-read them FOR UPDATE: those still in `state`, as they are now."""
    if not edges:
        return []
    keys = sorted(
        {
            json.dumps(
                [graph, "relation", e.source, e.relationship, e.destination, _relation_key(e)[3]],
                ensure_ascii=False,
            )
            for e in edges
        }
    )
    _run(graph, _LOCK_KEYS, [keys])
    rows = _run(graph, _LOCKED_EDGES, [_graphids(e.id for e in edges), json.dumps(state)])
    return [relation for relation, _ in _edge_rows(rows)]


def _valid_twins(
    graph: str, edges: Sequence[Relation]
) -> dict[tuple[int, int, str, str], Relation]:
    """The valid edges of the same relations as `edges` (same ends, type and scope), locked."""
    starts = _graphids({e.source_id for e in edges})
    ends = _graphids({e.destination_id for e in edges})
    wanted = {_relation_key(e) for e in edges}
    twins: dict[tuple[int, int, str, str], Relation] = {}
    for relation, _ in _edge_rows(_run(graph, _VALID_TWINS, [starts, ends])):
        if _relation_key(relation) in wanted:
            twins.setdefault(_relation_key(relation), relation)
    return twins


def _patch_edges(graph: str, patches: Mapping[int, Mapping[str, Any]]) -> list[Relation]:
    """Merge each patch into its edge's properties; the edges as they now are, by id."""
    if not patches:
        return []
    ids = sorted(patches)
    texts = [json.dumps(patches[i], ensure_ascii=False) for i in ids]
    rows = _run(graph, _PATCH_EDGES, [_graphids(ids), texts])
    return sorted((relation for relation, _ in _edge_rows(rows)), key=lambda r: r.id)
