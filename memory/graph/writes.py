"""Writes: entities, relations, and which memory mentions which entity.

Owns: the upsert of an entity (merged on its normalised name and scope) and the upsert locks
(lock_entities: several at once, in the one order every writer uses); the upsert of a relation
(a duplicate merged; its memory linked to both ends) and the invalidation of relations (by id
or by match; never a delete); linking a memory to entities (link_memory: vertices and
MemoryEntity rows); the vectors of a scope's entity names (EntityVector, for search's matching
by meaning, embedded outside the transactions that record them: name_vectors, names_embedded;
embed_entity_names fills in those missing). Of engram, may import memory.models,
memory.text.embeddings, tenants and memory.graph.values, .statements, .age and .reads.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

from django.db import connection

from memory.graph.age import (
    _cypher,
    _edge_rows,
    _entity_row,
    _graphids,
    _json,
    _lock,
    _now,
    _run,
    ensure_graph,
)
from memory.graph.reads import _find_entity
from memory.graph.statements import (
    _EDGE_BETWEEN,
    _INSERT_EDGE,
    _INSERT_ENTITY,
    _INVALIDATE_BY_MATCH,
    _LOCK_KEYS,
    _PATCH_EDGES,
    _PATCH_ENTITY,
    _VALID_EDGES_BY_ID,
)
from memory.graph.values import (
    Entity,
    ProjectId,
    Relation,
    Scope,
    _entity_name,
    _exact_scope,
    normalise_name,
    normalise_relationship,
)
from memory.models import SCOPE_FIELDS, EntityVector, Memory, MemoryEntity
from memory.text.embeddings import embed_words
from tenants.db import project_context

# -- entities ----------------------------------------------------------------------------------


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
        return Relation.from_row(
            {
                "id": edge_id,
                "p": properties,
                "src": src.name,
                "dst": dst.name,
                "src_id": src.id,
                "dst_id": dst.id,
            }
        )


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


def _patch_edges(graph: str, patches: Mapping[int, Mapping[str, Any]]) -> list[Relation]:
    """Merge each patch into its edge's properties; the edges as they now are, by id."""
    if not patches:
        return []
    ids = sorted(patches)
    texts = [json.dumps(patches[i], ensure_ascii=False) for i in ids]
    rows = _run(graph, _PATCH_EDGES, [_graphids(ids), texts])
    return sorted((relation for relation, _ in _edge_rows(rows)), key=lambda r: r.id)


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
    does it for many memories at once (remember=False), give new names their vectors. Raises
    Memory.DoesNotExist when the memory is gone (nothing is written), ValueError when it is
    not of `scope`."""
    memory = Memory.objects.only(*SCOPE_FIELDS).get(pk=memory_id, project_id=project)
    memory_scope = Scope.of(memory.scope)
    if scope is not None and scope != memory_scope:
        raise ValueError("the memory belongs to another scope")
    linked, rows = _link_many(graph, project, [(memory.pk, memory_scope, list(entities))])
    if remember:
        _remember_names(project, memory_scope, [row.entity_name for row in rows])
    return linked.get(memory.pk, [])


def _link_many(
    graph: str,
    project: ProjectId,
    items: Sequence[tuple[uuid.UUID, Scope, Sequence[tuple[str, str]]]],
) -> tuple[dict[uuid.UUID, list[Entity]], list[MemoryEntity]]:
    """Link each memory of `items` (its id, its scope, the (name, type) pairs it mentions) to
    its entities, in the caller's transaction: for each memory the entities linked, and the
    MemoryEntity rows made. A mention counts once per memory: each entity is upserted once,
    with one more mention for each memory that names it for the first time (the memories'
    links are read first), and the rows are written in one statement."""
    wanted: dict[uuid.UUID, dict[str, tuple[str, str]]] = {}
    scopes: dict[uuid.UUID, Scope] = {}
    for memory_id, scope, pairs in items:
        scopes[memory_id] = scope
        for name, entity_type in pairs:
            wanted.setdefault(memory_id, {}).setdefault(_entity_name(name), (name, entity_type))
    known = set(
        MemoryEntity.objects.filter(
            memory_id__in=list(wanted),
            entity_name__in=sorted({n for names in wanted.values() for n in names}),
        ).values_list("memory_id", "entity_name")
    )
    # Each (scope, entity) once, in the order first named: its spelling and type as first
    # named, and the memories that name it for the first time.
    first: dict[tuple[Scope, str], tuple[str, str]] = {}
    mentions: dict[tuple[Scope, str], int] = {}
    for memory_id, names in wanted.items():
        for normalised, pair in names.items():
            key = (scopes[memory_id], normalised)
            first.setdefault(key, pair)
            mentions[key] = mentions.get(key, 0) + ((memory_id, normalised) not in known)
    upserted = {
        key: _upsert_entity(graph, key[0], name, entity_type, mentions[key])
        for key, (name, entity_type) in first.items()
    }
    linked: dict[uuid.UUID, list[Entity]] = {}
    rows: list[MemoryEntity] = []
    for memory_id, names in wanted.items():
        scope = scopes[memory_id]
        for normalised in names:
            entity = upserted[(scope, normalised)]
            linked.setdefault(memory_id, []).append(entity)
            if (memory_id, normalised) not in known:
                rows.append(
                    MemoryEntity(
                        project_id=project,
                        memory_id=memory_id,
                        entity_name=normalised,
                        vertex_id=entity.id,
                        **scope.as_dict(),
                    )
                )
    MemoryEntity.objects.bulk_create(rows, ignore_conflicts=True)
    return linked, rows


# The vectors of entity names embedded before the transaction that may record them
# (name_vectors, given by `names_embedded`): a hosted embedder is an HTTP call, which must never
# hold a transaction open. A name not among them is embedded where it is recorded.
_EMBEDDED: ContextVar[Mapping[str, Any]] = ContextVar(
    "embedded_names", default=MappingProxyType({})
)


def name_vectors(project: ProjectId, scope: Scope, names: Iterable[str]) -> dict[str, Any]:
    """The vectors of those of `names` (normalised) the scope has none for yet, embedded now:
    outside any transaction, for the writes that follow (`names_embedded`)."""
    wanted = sorted({_entity_name(name) for name in names} - {""})
    if not wanted:
        return {}
    with project_context(project):
        have = set(
            EntityVector.objects.filter(
                project_id=project, entity_name__in=wanted, **_exact_scope(scope)
            ).values_list("entity_name", flat=True)
        )
    missing = [name for name in wanted if name not in have]
    if not missing:
        return {}
    return dict(zip(missing, embed_words(missing), strict=True))  # a word may be precomputed


@contextmanager
def names_embedded(vectors: Mapping[str, Any]) -> Iterator[None]:
    """Within the block, entity names of `vectors` are recorded with them (not embedded)."""
    token = _EMBEDDED.set({**_EMBEDDED.get(), **vectors})
    try:
        yield
    finally:
        _EMBEDDED.reset(token)


def _remember_names(project: ProjectId, scope: Scope, names: Sequence[str]) -> None:
    """Give each of the scope's entity `names` its vector (EntityVector) if it has none yet:
    search matches query words against them by meaning. The missing ones come from
    `names_embedded`, or are embedded in one batch; a concurrent writer of the same name is
    ignored (the same name, the same vector)."""
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
    embedded = _EMBEDDED.get()
    rest = [name for name in missing if name not in embedded]
    found = {**embedded, **dict(zip(rest, embed_words(rest), strict=True))} if rest else embedded
    EntityVector.objects.bulk_create(
        [
            EntityVector(
                project_id=project, entity_name=name, embedding=found[name], **scope.as_dict()
            )
            for name in missing
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
            part = names[start : start + chunk]
            with names_embedded(name_vectors(project, scope, part)), project_context(project):
                _remember_names(project, scope, part)
    return sum(len(names) for names in by_scope.values())


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
