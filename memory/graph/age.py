"""AGE plumbing: a project's graph, its creation, and running statements on it.

Cypher through AGE, parameters only, inside the tenant context. Owns: the graph's name (derived
from the project, checked before it is placed in a query) and labels; ensure_graph (creation
through engram_ensure_graph, the session made ready for cypher()); running one Cypher query
(_cypher, values as AGE's bound parameter map) or one SQL statement over the label tables
(_run); the advisory lock of an upsert (_lock); agtype rows turned into values (_entity_row,
_edge_rows). Runs in the caller's tenant context and opens none. Of engram, may import
memory.graph.values only.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, LiteralString

import psycopg
from django.db import connection

from memory.graph.values import Entity, ProjectId, Relation

ENTITY_LABEL = "Entity"
RELATION_LABEL = "RELATES"
_GRAPH_NAME = re.compile(r"g_[0-9a-f]{32}")


# -- names -------------------------------------------------------------------------------------


def graph_name(project: ProjectId) -> str:
    """The project's AGE graph: `g_` + the UUID's hex (also what engram_ensure_graph makes)."""
    name = "g_" + uuid.UUID(str(project)).hex
    return _checked(name)  # the only text ever formatted into a query


def _checked(graph: str) -> str:
    if not _GRAPH_NAME.fullmatch(graph):
        raise ValueError("not a graph name")
    return graph


# -- running statements ------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


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


def _run(graph: str, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement.replace("{graph}", _checked(graph)), params)
        return list(cursor.fetchall())


def _graphids(ids: Iterable[int]) -> str:
    return "{" + ",".join(str(int(i)) for i in ids) + "}"


# -- agtype rows as values ---------------------------------------------------------------------


def _entity_row(row: Sequence[Any]) -> Entity:
    return Entity.from_row({"id": row[0], "p": json.loads(row[1])})


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
