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

from memory.models import SCOPE_FIELDS, Memory, MemoryEntity
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

_ENTITY_OUT: LiteralString = "{id: id(n), p: properties(n)}"
_RELATION_OUT: LiteralString = (
    "{id: id(r), p: properties(r), src: a.name, dst: b.name, src_id: id(a), dst_id: id(b)}"
)

_BUMP_ENTITY: LiteralString = (
    "MATCH (n:Entity) WHERE n.name = $name AND n.scope = $scope "
    "SET n.mentions = n.mentions + $increment "
    "RETURN " + _ENTITY_OUT
)
_CREATE_ENTITY: LiteralString = (
    "CREATE (n:Entity {name: $name, display_name: $display_name, type: $type, scope: $scope, "
    "user_id: $user_id, agent_id: $agent_id, app_id: $app_id, run_id: $run_id, "
    "created_at: $now, mentions: $increment}) RETURN " + _ENTITY_OUT
)
# Anchored on the source's name (the entity_name index), then along relates_start.
_FIND_EDGE: LiteralString = (
    "MATCH (a:Entity)-[r:RELATES {type: $type, scope: $scope, valid: true}]->(b:Entity) "
    "WHERE a.name = $src AND a.scope = $scope AND b.name = $dst AND b.scope = $scope "
)
_MATCH_RELATION: LiteralString = _FIND_EDGE + "RETURN " + _RELATION_OUT
_APPEND_MEMORY: LiteralString = (
    _FIND_EDGE + "SET r.memory_ids = $memory_ids RETURN " + _RELATION_OUT
)
_CREATE_RELATION: LiteralString = (
    "MATCH (a:Entity), (b:Entity) "
    "WHERE a.name = $src AND a.scope = $scope AND b.name = $dst AND b.scope = $scope "
    "CREATE (a)-[r:RELATES {type: $type, scope: $scope, user_id: $user_id, agent_id: $agent_id, "
    "app_id: $app_id, run_id: $run_id, valid: true, created_at: $now, invalidated_at: '', "
    "memory_ids: $memory_ids, event_id: $event_id}]->(b) RETURN " + _RELATION_OUT
)
_INVALIDATE_BY_ID: LiteralString = (
    "MATCH (a:Entity)-[r:RELATES {scope: $scope, valid: true}]->(b:Entity) "
    "WHERE id(r) IN $ids SET r.valid = false, r.invalidated_at = $now RETURN " + _RELATION_OUT
)
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
# The ids of the scope's entities with these names.
_FIND_ENTITIES: LiteralString = (
    "MATCH (n:Entity) WHERE n.name IN $names AND n.scope = $scope RETURN {id: id(n)}"
)
_FIND_ENTITY: LiteralString = (
    "MATCH (n:Entity) WHERE n.name = $name AND n.scope = $scope RETURN " + _ENTITY_OUT
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


def _upsert_entity(graph: str, scope: Scope, name: str, entity_type: str, increment: int) -> Entity:
    normalised = _entity_name(name)
    _lock(graph, "entity", normalised, scope.key)
    params = {"name": normalised, "scope": scope.key, "increment": increment}
    rows = _cypher(graph, _BUMP_ENTITY, params)
    if not rows:
        params |= scope.properties() | {
            "display_name": name.strip() or normalised,
            "type": normalise_name(entity_type),
            "now": _now(),
        }
        rows = _cypher(graph, _CREATE_ENTITY, params)
    return Entity.from_row(rows[0])


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
        rows = _cypher(graph, _FIND_ENTITY, {"name": _entity_name(name), "scope": scope.key})
    return Entity.from_row(rows[0]) if rows else None


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
        params: dict[str, Any] = {
            "src": src.name,
            "dst": dst.name,
            "type": kind,
            "scope": scope.key,
        }
        found = _cypher(graph, _MATCH_RELATION, params)
        mid = None if memory_id is None else str(memory_id)
        if found:
            relation = Relation.from_row(found[0])
            if mid is None or mid in relation.memory_ids:
                return relation
            params["memory_ids"] = [*relation.memory_ids, mid]
            return Relation.from_row(_cypher(graph, _APPEND_MEMORY, params)[0])
        params |= scope.properties() | {
            "now": _now(),
            "memory_ids": [] if mid is None else [mid],
            "event_id": "" if event_id is None else str(event_id),
        }
        return Relation.from_row(_cypher(graph, _CREATE_RELATION, params)[0])


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
            edge_ids = [int(i) for i in ids]
            if not edge_ids:
                return []
            rows = _cypher(graph, _INVALIDATE_BY_ID, params | {"ids": edge_ids})
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
        ids = _cypher(graph, _FIND_ENTITIES, {"names": normalised, "scope": scope.key})
        if not ids:
            return []
        wanted: dict[str, Any] = {"scope": scope.key, "valid": True}
        if relationship is not None:
            wanted["type"] = normalise_relationship(relationship)
        step = _Step(scope, [int(row["id"]) for row in ids], [], False, limit)
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
        start = _cypher(
            graph, _FIND_ENTITY, {"name": _entity_name(entity_name), "scope": scope.key}
        )
        if not start:
            return Traversal()
        root = Entity.from_row(start[0])
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
        rows = cursor.fetchall()
    found = []
    for edge_id, start_id, end_id, props, start_props, end_props in rows:
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


# -- the memory <-> entity index ---------------------------------------------------------------


def _link(
    graph: str,
    project: ProjectId,
    memory_id: uuid.UUID | str,
    entities: Iterable[tuple[str, str]],
    scope: Scope | None = None,
) -> list[Entity]:
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
    return linked


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
    filters: dict[str, Any] = {}
    for f, value in scope.as_dict().items():
        filters[f if value is not None else f"{f}__isnull"] = value if value is not None else True
    with project_context(project):
        return list(
            MemoryEntity.objects.filter(project_id=project, entity_name__in=normalised, **filters)
            .values_list("memory_id", flat=True)
            .distinct()
        )
