"""Reads across scopes, as search filters them: the HTTP API's (memory.queries) and search's.

The readers of memory.graph.reads take one exact scope (its key). The API reads the way search
filters (memory.retrieval.filters): each id the filter names must match, "*" accepts any set
value, one required unset (NOT "*") must be unset, one left out is not tested. ScopeMatch says
that for the four id properties every vertex and edge carries ("" when unset), and the SQL
below tests it by agtype containment (@>) on the label tables, values as parameters; only the
checked graph name and fixed aliases are formatted in. A read may also keep only the
relations asserted by at least one memory of a queryset (the caller's other filters), tested
against the edge's memory_ids.

Owns: relations_in and count_relations_in (pages of the matched scopes' relations),
traverse_in, relations_touching_in, and relations_of_memories (for search's enable_graph: the
relations its ranked memories assert). Of engram, may import memory.models, tenants and
memory.graph.values, .statements and .age.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, LiteralString

from memory.graph.age import _edge_rows, _graphids, _run, ensure_graph
from memory.graph.statements import _CONTAINS, _EDGE_COLUMNS, _GATED, _MEMORY_IDS
from memory.graph.values import (
    ANY_VALUE,
    MAX_DEPTH,
    MAX_LIMIT,
    EdgeFilter,
    Entity,
    ProjectId,
    Relation,
    ScopeMatch,
    Traversal,
    _check_page,
    _entity_name,
    normalise_name,
)
from memory.models import MemoryEntity
from tenants.db import project_context


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
