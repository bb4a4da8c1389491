"""Every statement the graph sends, in one place: what it can do to the database is read here.

AGE 1.5 checks no table privileges on its own writes (a Cypher DELETE works without the DELETE
grant), so no statement here deletes, drops or removes (tests/memory/test_graph.py reads them
all). Writes are plain SQL INSERT / UPDATE on the label tables, which the row-level security
policies check; the one Cypher write is a SET on edges already visible. `{graph}` is replaced by
the checked graph name (memory.graph.age), the only text formatted in; values are parameters.
The reads across scopes (memory.graph.filtered) compose theirs from the pieces below.

Owns the text of the statements only; imports nothing of engram.
"""

from __future__ import annotations

from typing import LiteralString

# -- Cypher ------------------------------------------------------------------------------------

_RELATION_OUT: LiteralString = (
    "{id: id(r), p: properties(r), src: a.name, dst: b.name, src_id: id(a), dst_id: id(b)}"
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


# -- entities and edges ------------------------------------------------------------------------


# Entity and edge writes are plain SQL on the label tables (the app role may INSERT and UPDATE
# them), not Cypher: the lookups meet the name and edge-end indexes (a one-table Cypher MATCH
# scans every entity of the project under row-level security, see the package's notes), and an
# INSERT or UPDATE is checked by the tables' WITH CHECK policies, which AGE's own CREATE skips.
# Entities by vertex id, each joined to itself as every read by id is (row-level security's
# test becomes a one-time filter and the primary key serves).
_ENTITIES_BY_ID: LiteralString = """
SELECT n.id::text, ag_catalog.agtype_out(n.properties)::text
FROM {graph}."Entity" n JOIN {graph}."Entity" gate ON gate.id = n.id
WHERE n.id = ANY(%s::ag_catalog.graphid[])
"""
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
# The valid edges of a scope among these ids, locked (joined to an end: see _GATED).
_VALID_EDGES_BY_ID: LiteralString = """
SELECT r.id::text FROM {graph}."RELATES" r JOIN {graph}."Entity" s ON s.id = r.start_id
WHERE r.id = ANY(%s::ag_catalog.graphid[])
  AND r.properties OPERATOR(ag_catalog.@>) %s::text::ag_catalog.agtype
ORDER BY r.id FOR UPDATE OF r
"""
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
_LOCK_KEYS: LiteralString = (
    "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest(%s::text[]) AS k"
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


# -- pieces of the reads across scopes ---------------------------------------------------------

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


# -- retraction --------------------------------------------------------------------------------

_CITED: LiteralString = """
SELECT engram_current_project() IS NOT DISTINCT FROM %(project)s::uuid,
       ARRAY(SELECT DISTINCT l.memory_id::text FROM memory_memoryentity l
             WHERE l.project_id = %(project)s::uuid AND l.memory_id = ANY(%(ids)s::uuid[])
               AND to_regnamespace(%(graph)s) IS NOT NULL
             ORDER BY 1)
"""
_CITES: LiteralString = "r.properties OPERATOR(ag_catalog.@>) %s::ag_catalog.agtype"
_EDGES_BY_ID: LiteralString = (
    _EDGE_COLUMNS + "WHERE r.id = ANY(%s::ag_catalog.graphid[]) ORDER BY r.id"
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
