"""A project's whole graph, read out and written back as it was (export_project, import_project).

Reads every vertex and edge of the project's graph with its properties unchanged, in id order,
page by page; writes a vertex or an edge back with the properties it had (times, validity,
invalidated_at, memory_ids, event_id), unless an equal one is there already: a vertex of the same
normalised name and scope (the key every writer merges on), an edge between the same ends whose
properties contain all of the record's. Vertex and edge ids are AGE's own (a label's sequence),
so a written one gets a new id: the caller maps the old ids to the new.

Plain SQL on the label tables like the rest of the store (statements of its own below, the
writes are memory.graph.statements' inserts); runs in the caller's tenant context, opens none.
Of engram, may import memory.models and memory.graph.values, .statements, .age and .reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, LiteralString

from django.db import connection

from memory.graph.age import _json, _lock, _run, ensure_graph, graph_name
from memory.graph.reads import _find_entity
from memory.graph.statements import _EDGE_BETWEEN, _INSERT_EDGE, _INSERT_ENTITY
from memory.graph.values import ProjectId, Scope, normalise_name
from memory.models import SCOPE_FIELDS

PAGE = 1000

_ENTITY_PAGE: LiteralString = """
SELECT n.id::text, ag_catalog.agtype_out(n.properties)::text
FROM {graph}."Entity" n WHERE n.id > %s::text::ag_catalog.graphid ORDER BY n.id LIMIT %s
"""
_EDGE_PAGE: LiteralString = """
SELECT r.id::text, r.start_id::text, r.end_id::text, ag_catalog.agtype_out(r.properties)::text
FROM {graph}."RELATES" r WHERE r.id > %s::text::ag_catalog.graphid ORDER BY r.id LIMIT %s
"""


def graph_exists(project: ProjectId) -> bool:
    """Whether the project has a graph yet (made on its first entity)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regnamespace(%s) IS NOT NULL", [graph_name(project)])
        row = cursor.fetchone()
    return bool(row and row[0])


def dump_entities(project: ProjectId) -> Iterator[tuple[int, dict[str, Any]]]:
    """(vertex id, properties) of every entity of the project's graph, by id."""
    yield from ((int(row[0]), json.loads(row[1])) for row in _pages(project, _ENTITY_PAGE))


def dump_relations(project: ProjectId) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    """(edge id, start vertex id, end vertex id, properties) of every edge, by id."""
    for row in _pages(project, _EDGE_PAGE):
        yield int(row[0]), int(row[1]), int(row[2]), json.loads(row[3])


def _pages(project: ProjectId, statement: LiteralString) -> Iterator[tuple[Any, ...]]:
    if not graph_exists(project):
        return
    graph = ensure_graph(project)
    after = 0
    while True:
        rows = _run(graph, statement, [str(after), PAGE])
        yield from rows
        if len(rows) < PAGE:
            return
        after = int(rows[-1][0])


def _scope_of(properties: dict[str, Any]) -> Scope:
    text = properties.get("scope")
    if not isinstance(text, str):
        raise ValueError("a graph record needs its scope")
    ids = json.loads(text)
    if not isinstance(ids, list) or len(ids) != len(SCOPE_FIELDS):
        raise ValueError("an entity's scope must list the four scope ids")
    return Scope.of(dict(zip(SCOPE_FIELDS, ids, strict=True)))


def check_entity(properties: dict[str, Any]) -> Scope:
    """The entity's scope, if its properties are an entity's (ValueError otherwise)."""
    _check_agtype(properties)
    name = properties.get("name")
    if not isinstance(name, str) or not name or normalise_name(name) != name:
        raise ValueError("an entity needs its normalised name")
    scope = _scope_of(properties)
    if properties["scope"] != scope.key:
        raise ValueError("an entity's scope is not in its canonical form")
    return scope


def check_relation(properties: dict[str, Any]) -> None:
    """ValueError unless the properties are a relation's."""
    _check_agtype(properties)
    if not isinstance(properties.get("type"), str) or not isinstance(properties.get("valid"), bool):
        raise ValueError("a relation needs its type and validity")
    _scope_of(properties)


def _check_agtype(value: Any) -> None:
    """AGE's integers are 64-bit (JSON's are not bounded)."""
    if isinstance(value, dict):
        for item in value.values():
            _check_agtype(item)
    elif isinstance(value, list):
        for item in value:
            _check_agtype(item)
    elif isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise ValueError("a graph property holds an integer out of range")


def load_entity(project: ProjectId, properties: dict[str, Any]) -> tuple[int, bool]:
    """The vertex with these properties: (its id, whether it was written now). An entity of
    the same normalised name and scope already there is the one (nothing written)."""
    scope = check_entity(properties)
    name = properties["name"]
    graph = ensure_graph(project)
    _lock(graph, "entity", name, scope.key)
    found = _find_entity(graph, scope, name)
    if found is not None:
        return found.id, False
    [(vertex_id, _)] = _run(graph, _INSERT_ENTITY, [_json(properties)])
    return int(vertex_id), True


def load_relation(
    project: ProjectId, start: int, end: int, properties: dict[str, Any]
) -> tuple[int, bool]:
    """The edge start -> end with these properties: (its id, whether it was written now). An
    edge between the same ends whose properties contain all of these is the one."""
    check_relation(properties)
    graph = ensure_graph(project)
    _lock(graph, "relation", str(start), str(end), _json(properties))
    found = _run(graph, _EDGE_BETWEEN, [str(start), str(end), _json(properties)])
    if found:
        return int(found[0][0]), False
    [(edge_id,)] = _run(graph, _INSERT_EDGE, [str(start), str(end), _json(properties)])
    return int(edge_id), True


def count_graph(project: ProjectId) -> tuple[int, int]:
    """(entities, relations) of the project's graph."""
    if not graph_exists(project):
        return 0, 0
    graph = ensure_graph(project)
    [(entities,)] = _run(graph, 'SELECT count(*) FROM {graph}."Entity"', [])
    [(relations,)] = _run(graph, 'SELECT count(*) FROM {graph}."RELATES"', [])
    return int(entities), int(relations)
