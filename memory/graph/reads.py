"""Reads of one exact scope (its key): what the extraction pipeline and the writes read.

Owns: an entity by name (find_entity; every upsert looks it up first), entities by id
(entities_by_id), a scope's relations
(relations, paged), the relations touching some entities (relations_touching: what a new fact
may contradict), traversal from an entity (traverse: one indexed query per hop), and the
memories linked to entities (memory_ids_for_entities, from MemoryEntity). Of engram, may import
memory.models, tenants and memory.graph.values, .statements and .age.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection

from memory.graph.age import (
    _checked,
    _cypher,
    _edge_rows,
    _entity_row,
    _graphids,
    _json,
    _run,
    ensure_graph,
)
from memory.graph.statements import (
    _ENTITIES_BY_ID,
    _ENTITIES_BY_NAMES,
    _ENTITY_BY_NAME,
    _LIST_RELATIONS,
    _NEIGHBOURS_SQL,
)
from memory.graph.values import (
    MAX_DEPTH,
    Entity,
    ProjectId,
    Relation,
    Scope,
    Traversal,
    _check_page,
    _entity_name,
    _exact_scope,
    normalise_name,
    normalise_relationship,
)
from memory.models import MemoryEntity
from tenants.db import project_context

# -- entities ----------------------------------------------------------------------------------


def _find_entity(graph: str, scope: Scope, normalised: str) -> Entity | None:
    rows = _run(graph, _ENTITY_BY_NAME, [_json(normalised), _json(scope.key)])
    return _entity_row(rows[0]) if rows else None


def find_entity(project: ProjectId, scope: Scope, name: str) -> Entity | None:
    with project_context(project):
        graph = ensure_graph(project)
        return _find_entity(graph, scope, _entity_name(name))


def entities_by_id(project: ProjectId, ids: Iterable[int]) -> dict[int, Entity]:
    """The project's entities among these vertex ids (Relation.source_id, .destination_id),
    by id, in one statement; ids not found are left out."""
    wanted = sorted({int(i) for i in ids})
    if not wanted:
        return {}
    with project_context(project):
        graph = ensure_graph(project)
        rows = _run(graph, _ENTITIES_BY_ID, [_graphids(wanted)])
    return {entity.id: entity for entity in map(_entity_row, rows)}


# -- relations ---------------------------------------------------------------------------------


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

    The names are looked up once (a scan of the project's entities, see the package's notes on
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
