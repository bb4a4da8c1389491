"""Retraction: relations follow the memories behind them.

An edge holds while an active memory asserts it (its memory_ids). The memory actions call
these in their own transaction, so every caller gets them: deleting, superseding or rewording
memories retracts them (retract_memories); restoring a deleted memory reinstates it
(reinstate_memories).

- Retraction: each valid edge citing a retracted memory and backed by no other active memory
  is invalidated (valid=false, invalidated_at, invalidated_by="retraction"; kept as history,
  never erased); an edge another active memory backs stays valid. A reworded memory (its text
  changed) also leaves the edges' memory_ids: its new text no longer asserts what the old
  one did, so it must not keep an edge alive later nor bring one back on a restore. The edge
  keeps the wording it lost (`reworded`: "<memory id>:<id of the history row of the edit>",
  whose old text is that wording; ids only, so an erasure leaves no trace of the text).
- Rejoining: a memory whose text becomes such a wording again (an earlier version made
  current, a correction undone) backs those edges again (rejoin_wording), re-validated as a
  restore re-validates them; a new wording is not re-extracted (no model call on an edit).
- Reinstatement: each edge invalidated by retraction that cites a restored memory is valid
  again, unless the same relation (same ends, type and scope) has a valid edge by now; then
  the memory joins that edge's memory_ids. Edges invalidated by a contradiction
  (invalidate_relations: no invalidated_by) are never re-validated, and a restore does not
  re-check contradictions.
- Cost. A memory with no MemoryEntity row has no edge (upsert_relation links the memory an
  edge cites to both its ends): one indexed query, and the graph is neither read nor created.
  Otherwise SQL over the label tables, each statement joined to the Entity table so that
  row-level security's test becomes a one-time filter and the indexes serve (see the
  package docstring): edges found by containment of the memory id in memory_ids (the
  relates_props GIN index), re-read and updated by id (relates_id).
- Concurrency. The edges are locked as upsert_relation locks one (its advisory key, taken in
  key order), re-read FOR UPDATE, and only then are their other memories' states read: two
  transactions retracting the two backers of one edge serialise, and the second sees the
  first's deletion; an upsert of the same relation waits for the retraction.
- Writes are plain SQL UPDATEs merging the changed properties (agtype ||), so the WITH
  CHECK policy of the graph's tables applies to them, unlike AGE's own SET.

Owns retract_memories, rejoin_wording, reinstate_memories and revalidate_relations (a
revert's). Of engram,
may import memory.models, tenants and memory.graph.values, .statements, .age and .writes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection

from memory.graph.age import _edge_rows, _graphids, _now, _run, ensure_graph, graph_name
from memory.graph.statements import (
    _CITED,
    _CITES,
    _EDGE_COLUMNS,
    _EDGES_BY_ID,
    _LOCK_KEYS,
    _LOCKED_EDGES,
    _VALID_TWINS,
)
from memory.graph.values import ProjectId, Relation, Scope
from memory.graph.writes import _patch_edges
from memory.models import Memory
from tenants.db import project_context

RETRACTION = "retraction"
_CITING_CHUNK = 200  # memory ids per statement: one GIN containment test each


def retract_memories(
    project: ProjectId,
    memory_ids: Iterable[uuid.UUID | str],
    *,
    reworded: Mapping[uuid.UUID, uuid.UUID] | None = None,
) -> list[Relation]:
    """These memories no longer assert their relations (deleted or superseded; `reworded`,
    each memory id to the id of the history row of the edit, when their text changed):
    invalidate the valid edges citing them that no other active memory backs. Returns the
    edges they stopped backing (those now invalid, with those another memory keeps valid
    when `reworded`). See the module docstring."""
    wordings = {_memory_key(m): str(h) for m, h in (reworded or {}).items()}
    ids = _memory_keys([*memory_ids, *wordings])
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
            if wordings:
                patch["memory_ids"] = [m for m in edge.memory_ids if m not in gone]
                said = {f"{m}:{wordings[m]}" for m in edge.memory_ids if m in wordings}
                patch["reworded"] = sorted(said.union(edge.reworded))
            if not backers.intersection(edge.memory_ids):
                patch |= {"valid": False, "invalidated_at": now, "invalidated_by": RETRACTION}
            if patch:
                patches[edge.id] = patch
        changed = _patch_edges(graph, patches)
    return [r for r in changed if not r.valid or wordings]


def rejoin_wording(
    project: ProjectId, memory_id: uuid.UUID | str, edits: Iterable[uuid.UUID | str]
) -> list[Relation]:
    """An active memory's text is again one it had when it backed relations (an earlier
    version made current again, a correction undone); `edits`: the ids of its history rows
    that replaced that text. Each edge that lost the memory in one of those edits
    (retract_memories' `reworded`) gets it back in its memory_ids; one invalidated by
    retraction is valid again, unless the same relation has a valid edge by now (the memory
    joins that one). An edge ended by a contradiction stays invalid. Returns the edges it
    backs again, as they now are."""
    mid = _memory_key(memory_id)
    said = [f"{mid}:{edit}" for edit in sorted({str(e) for e in edits})]
    if not said or not _cited(project, [mid]):
        return []
    with project_context(project):
        graph = ensure_graph(project)
        edges = [
            e
            for e in _lock_edges(graph, _edges_rewording(graph, said), {})
            if set(said).intersection(e.reworded)
            and mid not in e.memory_ids
            and (e.valid or e.invalidated_by == RETRACTION)
        ]
        if not edges or mid not in _active(project, [mid]):
            return []
        joined = _patch_edges(graph, {e.id: {"memory_ids": [*e.memory_ids, mid]} for e in edges})
        back = _bring_back(graph, [e for e in joined if not e.valid], {mid})
        again = {r.id: r for r in [*joined, *back] if r.valid and mid in r.memory_ids}
        return [again[i] for i in sorted(again)]


def memory_relations(
    project: ProjectId, memory_id: uuid.UUID | str, edits: Iterable[uuid.UUID | str] = ()
) -> list[Relation]:
    """The edges that cite the memory, in any state, and those it stopped backing in these
    edits (ids of its history rows), as they now are, oldest first: what its page shows."""
    mid = _memory_key(memory_id)
    if not _cited(project, [mid]):
        return []
    said = [f"{mid}:{edit}" for edit in sorted({str(e) for e in edits})]
    with project_context(project):
        graph = ensure_graph(project)
        found = {r.id: r for r in _edges_citing(graph, [mid], {})}
        found |= {r.id: r for r in _edges_rewording(graph, said)}
    return [found[i] for i in sorted(found)]


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
        return _bring_back(graph, edges, back)


def revalidate_relations(project: ProjectId, ids: Sequence[int]) -> list[Relation]:
    """Edges invalidated by a contradiction (invalidate_relations) valid again, as a revert of
    the add request that contradicted them asks: each one of `ids` still invalid and not
    retracted, that an active memory backs or that cites none, is valid again, unless the same
    relation has a valid edge by now (then its active memories join that edge). Returns the
    edges that changed."""
    if not ids:
        return []
    with project_context(project):
        graph = ensure_graph(project)
        contradicted = {"valid": False}
        found = [
            relation
            for relation, _ in _edge_rows(_run(graph, _EDGES_BY_ID, [_graphids(ids)]))
            if not relation.valid and relation.invalidated_by != RETRACTION
        ]
        edges = [
            e for e in _lock_edges(graph, found, contradicted) if e.invalidated_by != RETRACTION
        ]
        back = _active(project, {m for e in edges for m in e.memory_ids})
        return _bring_back(
            graph, [e for e in edges if not e.memory_ids or back & set(e.memory_ids)], back
        )


def _bring_back(graph: str, edges: Sequence[Relation], back: set[str]) -> list[Relation]:
    """Make `edges` valid again, in id order (the oldest edge of a relation comes back first),
    except where the same relation has a valid edge by now: then the memories of `back` they
    cite join that edge's memory_ids. Returns the edges that changed."""
    if not edges:
        return []
    twins = _valid_twins(graph, edges)
    backing = {twin.id: list(twin.memory_ids) for twin in twins.values()}
    patches: dict[int, dict[str, Any]] = {}
    for edge in edges:
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


def _memory_key(memory_id: uuid.UUID | str) -> str:
    """A memory id as edges cite it (str of the UUID)."""
    return str(uuid.UUID(str(memory_id)))


def _memory_keys(memory_ids: Iterable[uuid.UUID | str]) -> list[str]:
    """Memory ids as edges cite them, sorted, once each."""
    return sorted({_memory_key(m) for m in memory_ids})


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


def _edges_rewording(graph: str, said: Sequence[str]) -> list[Relation]:
    """The edges whose `reworded` holds any of `said` (a GIN containment test each)."""
    found: dict[int, Relation] = {}
    for start in range(0, len(said), _CITING_CHUNK):
        chunk = said[start : start + _CITING_CHUNK]
        tests = " OR ".join([_CITES] * len(chunk))
        params = [json.dumps({"reworded": [entry]}) for entry in chunk]
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
