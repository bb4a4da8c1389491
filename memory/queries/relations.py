"""The graph reads (memory.graph): what a search filter keeps of the graph (graph_edges), the
relations of a graph read counted and sliced in the database, a traversal, the relations a
search answers with, the names a scope's own user or agent goes by (own_names), and the
display names of entities (entity_display_names).

May import memory.queries.core (matching), memory.graph, memory.models,
memory.retrieval.filters, memory.text (query, recognise) and tenants.db.
"""

# ruff: noqa: RUF001, RUF002 (the forms of other languages, in their own scripts)

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

from memory import graph
from memory.models import SCOPE_FIELDS
from memory.queries.core import matching
from memory.retrieval.filters import WILDCARD, FilterError, compile_filters, scope_fields_named
from memory.text import recognise
from memory.text.query import Query

# Relations a search answers with, when asked (enable_graph).
SEARCH_RELATIONS = 20
# Memories read to find which of a query's names the scope's own user or agent goes by.
OWN_NAME_MEMORIES = 50
# The forms of other languages (recognise._OWN_NAME_WORLD and _CJK_FIRST), a superset of them.
OWN_NAME_WORLD = (
    r"text ~* '(ich\s+hei(ß|ss)e|mein\s+name\s+ist|me\s+llamo|mi\s+nombre\s+es"
    r"|je\s+m(''|\u2019)appelle|mon\s+nom\s+est|mi\s+chiamo|il\s+mio\s+nome\s+è"
    r"|meu\s+nome\s+é|me\s+chamo|ik\s+heet|mijn\s+naam\s+is"
    r"|[мМ]еня\s+зовут|[мМ]о[её]\s+имя|[мМ]ене\s+звати|मेरा\s+नाम|اسمي"
    r"|我叫|我的名字|我名叫|名前は|[제내]\s*이름은)'"
    r" OR text ~ '^\s*[\u3400-\u4dbf\u4e00-\u9fff\u30a0-\u30ff\uac00-\ud7af]{2,4}"
    r"(です|と申します|といいます)'"
)
# The active memories that may say what their first person is called (a superset of what
# recognise.own_names reads): the condition of the partial index memory_own_names_v4 (memory
# migration 0034), character for character, so the planner reads that index.
OWN_NAME_PREDICATE = (
    "state = 'active' AND ("
    r"text ~* '\m(my|user''s)\s+((first|full|given)\s+)?name(\s+is|''s|\u2019s)\M"
    r"|^\s*((customer|client|member|contact|full|legal|preferred)\s+)?name(\s*:|\s+is\M)"
    r"|^\s*full\s+name\M|\mcalls?\s+me\M|\m(i|user)\s+go(es)?\s+by\M"
    r"|\m(i''m|i\u2019m|i\s+am|user\s+is)\s+(called|named)\M"
    r"|\mis\s+my\s+((first|full|given)\s+)?name\M'"
    r" OR text ~ '\m[Ii](''|\u2019)m\s+[[:upper:]]|\m[Ii]\s+am\s+[[:upper:]]'"
    f" OR {OWN_NAME_WORLD})"
)


def _braces(sql: str) -> str:
    """`sql` as literal text of a str.format() template (its regular expressions' {2,4})."""
    return sql.replace("{", "{{").replace("}", "}}")


OWN_NAMES_SQL = f"""
SELECT m.text FROM memory_memory m
WHERE m.project_id = %(project)s AND {{scope}} AND {_braces(OWN_NAME_PREDICATE)}
AND EXISTS (
    SELECT FROM unnest(%(names)s::text[]) AS n(name) WHERE strpos(lower(m.text), n.name) > 0
)
LIMIT {OWN_NAME_MEMORIES}
"""  # noqa: S608 (constants; every value is a parameter)


def own_names(
    project_id: uuid.UUID, scope: dict[str, str], names: Sequence[str], *, inflected: bool = False
) -> frozenset[str]:
    """Which of `names` (normalised) the scope's own user or agent goes by: its id (`scope`
    holds a user_id or, for an agent's own memories, an agent_id), or a name one of its active
    memories that has the name in its text says it is called ("My name is Dana.", "User goes
    by Dee", "My name is Tan Mei Ling." for "mei ling": recognise.own_names). The memories are
    read by the partial index of those that may say so (OWN_NAME_PREDICATE), not by their links
    to entities: "My name is Ahmet Yilmaz." is linked to the full name only.

    `inflected` (a question in a language that inflects names: "Какая у Дмитрия профессия?",
    "Wie heißt Katrins Hund?"): a name of the query also matches a said name it inflects
    (recognise.inflects: "дмитрия" for "дмитрий", "katrins" for "katrin")."""
    user, agent = scope.get("user_id"), scope.get("agent_id")
    mine = user or agent
    if not mine or not names:
        return frozenset()
    own = {n for n in names if n == recognise.normalise(mine)}
    rest = [n for n in names if n not in own]
    if not rest:
        return frozenset(own)
    where = "m.user_id = %(id)s" if user else "m.user_id IS NULL AND m.agent_id = %(id)s"
    # The memories are found by a name's text in theirs: an inflected one's stem is looked for.
    looked_for = [*rest, *{recognise.name_stem(n) for n in rest}] if inflected else rest
    with connection.cursor() as cursor:
        cursor.execute(
            OWN_NAMES_SQL.format(scope=where),
            {"names": looked_for, "project": project_id, "id": mine},
        )
        said = {name for (text,) in cursor.fetchall() for name in recognise.own_names(text)}
    own.update(name for name in rest if name in said)
    if inflected:
        own.update(n for n in rest if any(recognise.inflects(n, name) for name in said))
    return frozenset(own)


def graph_edges(
    project_id: uuid.UUID, filters: dict[str, Any], *, include_invalid: bool = False
) -> graph.EdgeFilter:
    """What a graph read keeps, for a search filter (memory.retrieval.filters), as search would.

    Scope ids as search reads them: those named must match ("*": any value), the others are
    not tested, and those under NOT as "*" ({"NOT": {"agent_id": "*"}}, or NOT of an OR of
    such) must be unset; at least one has a value. They must be plain values at the top level
    or under AND: the graph tests them on each vertex and edge. Any other condition
    (categories, dates, metadata, keywords, memory_ids, OR / NOT of those) keeps the relations
    asserted by at least one active, unexpired memory the whole filter matches. Raises
    FilterError.
    """
    where = compile_filters(filters)  # the one parser: validates every condition
    ids: dict[str, str | None] = {}
    other = False
    pending = [filters]
    while pending:
        for key, value in pending.pop().items():
            if key in SCOPE_FIELDS:
                if isinstance(value, bool) or not isinstance(value, str | int):
                    raise FilterError(
                        f"{key}: the graph takes a scope id as a plain value, or '*' for any."
                    )
                if ids.setdefault(key, str(value)) != str(value):
                    raise FilterError(f"{key} is given two different values.")
            elif key == "AND":
                pending.extend(value)
            elif key == "NOT" and (unset := required_unset(value)):
                for field in unset:
                    if ids.setdefault(field, None) is not None:
                        raise FilterError(f"{field} is given a value and required unset.")
            elif key in ("OR", "NOT") and any(scope_fields_named(value)):
                raise FilterError(
                    f"the graph takes scope ids at the top level or in AND, not in {key}."
                )
            else:
                other = True
    try:
        match = graph.ScopeMatch.of(ids)
    except ValueError:
        raise FilterError(
            "Give at least one of user_id, agent_id, app_id, run_id with a value (not '*')."
        ) from None
    backed = matching(project_id, where) if other else None
    return graph.EdgeFilter(match, include_invalid=include_invalid, backed_by=backed)


def required_unset(node: Any) -> list[str]:
    """The scope ids a NOT requires unset, for the graph: those of {"agent_id": "*"}, or of an
    OR of such objects ([] for any other NOT)."""
    if isinstance(node, list) and len(node) == 1:
        node = node[0]
    items = node.get("OR") if isinstance(node, dict) and set(node) == {"OR"} else [node]
    if not isinstance(items, list) or not items:
        return []
    fields: list[str] = []
    for item in items:
        if not (isinstance(item, dict) and len(item) == 1):
            return []
        ((field, value),) = item.items()
        if field not in SCOPE_FIELDS or value != WILDCARD:
            return []
        fields.append(field)
    return fields


class GraphRelations:
    """The relations of a graph read, for a paginator: counted and sliced in the database."""

    def __init__(self, project_id: uuid.UUID, edges: graph.EdgeFilter) -> None:
        self.project_id = project_id
        self.edges = edges
        self._count: int | None = None

    def __len__(self) -> int:
        if self._count is None:
            self._count = graph.count_relations_in(self.project_id, self.edges)
        return self._count

    def __getitem__(self, page: slice) -> list[graph.Relation]:
        start, stop = page.start or 0, page.stop
        if stop is None or stop <= start:
            return []
        return graph.relations_in(self.project_id, self.edges, limit=stop - start, offset=start)


def graph_relations(project_id: uuid.UUID, edges: graph.EdgeFilter) -> GraphRelations:
    """The relations the filter keeps, oldest first (valid ones unless it includes invalid)."""
    return GraphRelations(project_id, edges)


def entity_display_names(project_id: uuid.UUID, vertex_ids: Iterable[int]) -> dict[int, str]:
    """The display name (as first written, capitals kept) of each of these entities, by vertex
    id (Relation.source_id, .destination_id); one query. Ids not found are left out."""
    found = graph.entities_by_id(project_id, vertex_ids)
    return {vertex: entity.display_name for vertex, entity in found.items()}


def graph_traversal(
    project_id: uuid.UUID, edges: graph.EdgeFilter, entity: str, *, depth: int, limit: int
) -> graph.Traversal:
    """What the filtered graph links to the entity named `entity`, up to `depth` hops."""
    return graph.traverse_in(project_id, edges, entity, depth=depth, limit=limit)


def search_relations(
    project_id: uuid.UUID,
    filters: dict[str, Any],
    query: Query,
    ranked: Sequence[uuid.UUID],
    *,
    limit: int = SEARCH_RELATIONS,
) -> list[graph.Relation]:
    """The relations a search answers with: the valid ones its results (`ranked`, best first)
    assert, by the rank of their best memory; then, if the filter is one the graph reads
    (graph_edges), the valid ones touching an entity the query names, oldest first."""
    found = {r.id: r for r in graph.relations_of_memories(project_id, ranked, limit=limit)}
    if len(found) < limit:
        try:
            edges = graph_edges(project_id, filters)
        except FilterError:
            edges = None  # no scope id, or one under OR: only the results' own relations
        if edges is not None:
            for relation in graph.relations_touching_in(
                project_id, edges, list(query.names), limit=limit
            ):
                found.setdefault(relation.id, relation)
    return list(found.values())[:limit]
