"""Entity linking by the local recogniser (memory.text.recognise), run by the worker.

Owns link_mentions (the link_entities job: each memory linked to the entities recognised in its
text, its user's self entity included) and its limits. Of engram, may import memory.models,
memory.text.recognise, tenants and memory.graph.values, .age and .writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from memory.graph.age import ensure_graph
from memory.graph.values import ProjectId, Scope, _exact_scope, normalise_name
from memory.graph.writes import (
    _link_many,
    _lock_entities,
    _remember_names,
    name_vectors,
    names_embedded,
)
from memory.models import SCOPE_FIELDS, Memory, MemoryEntity
from memory.text.recognise import known_names, mentions_self, recognise, self_entity
from tenants.db import project_context

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
        with names_embedded(_chunk_vectors(project, chunk)), project_context(project):
            graph = ensure_graph(project)
            for scope in {scope for _, scope, _ in chunk}:
                names = [name for _, s, pairs in chunk if s == scope for name, _ in pairs]
                _lock_entities(graph, scope, names)
            # The memories are read first: nothing is written for one erased since the job was
            # queued.
            present = set(
                Memory.objects.filter(
                    project_id=project, pk__in=[memory.pk for memory, _, _ in chunk]
                ).values_list("pk", flat=True)
            )
            items = [(m.pk, scope, pairs) for m, scope, pairs in chunk if m.pk in present]
            _, new_links = _link_many(graph, project, items)
            made += len(new_links)
            linked_names: dict[Scope, set[str]] = {}
            for link in new_links:
                linked_names.setdefault(Scope.of(link.scope), set()).add(link.entity_name)
            for scope, new_names in linked_names.items():  # the chunk's new names, one batch
                _remember_names(project, scope, sorted(new_names))
    return made


def _chunk_vectors(
    project: ProjectId, chunk: list[tuple[Memory, Scope, list[tuple[str, str]]]]
) -> dict[str, Any]:
    """The chunk's new entity names embedded, before (outside) its transaction."""
    vectors: dict[str, Any] = {}
    for scope in {scope for _, scope, _ in chunk}:
        names = [name for _, s, pairs in chunk if s == scope for name, _ in pairs]
        vectors.update(name_vectors(project, scope, names))
    return vectors


def _scope_entity_names(project: ProjectId, scope: Scope) -> list[str]:
    filters = _exact_scope(scope)
    names = (
        MemoryEntity.objects.filter(project_id=project, **filters)
        .order_by("-id")
        .values_list("entity_name", flat=True)[:MAX_KNOWN_NAMES]
    )
    return list(dict.fromkeys(names))
