"""Loading a project file (import_project): the one writer of an import, batch by batch.

Each batch of records of one type is one transaction in the target project's tenant context
(row-level security on). Rows are written as they were: ids, times, states, supersession
links, history rows (no history row is added: an import changes no memory), graph vertices and
edges with their properties. No job is queued: entity links and vectors come from the file.

Ids. Kept by default. With `new_ids`, each id is replaced by uuid5(target project, old id):
fresh, every reference (replaced_by, source_event_id, conversation_id, history's memory and
event, feedback's memory, an edge's memory_ids and event_id, an event's results) maps the same
way without a table of them, and a second run maps to the same ids again. Graph vertex and edge
ids are AGE's own and always new: `Target` maps them as the file goes (entities come first).

Idempotent. A row whose id is in the target project already is skipped (counted as such), as
is an entity link, an entity vector or a scope summary whose natural key is there, and a graph
vertex or edge equal to one there (memory.graph.transfer). A kept id held by another project
of this instance refuses the batch (TransferConflictError, the batch rolled back).

Text is embedded before a batch's transaction opens, only when the file's embedding model is
not this instance's (`reembed`); otherwise the file's vectors are written as they are.

A dry run (the check before an import) writes what the import writes, graph included, in a
transaction its caller rolls back, only without embedding: so what the database refuses (an
index's limit, a value out of its range) is refused by the check as by the import, as a
FormatError, never a database error.

May import memory.models, memory.graph, memory.text, memory.transfer_format, tenants and
config.inputs.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, IntegrityError, connection, models, transaction
from django.db.models.constants import OnConflict

from config.inputs import UnsafeInputError, text_problem
from memory.actions._shared import schedule_entity_linking
from memory.graph.transfer import load_entity, load_relation
from memory.models import Memory, MemoryEntity, MemoryEvent
from memory.text.embeddings import embed, embed_words
from memory.text.language import detect
from memory.transfer_format import (
    ENTITY,
    ENTITY_LINK,
    ENTITY_VECTOR,
    EVENT,
    FEEDBACK,
    HISTORY,
    MEMORY,
    MODEL_FIELDS,
    RELATION,
    SUMMARY,
    FormatError,
    json_checked,
    row_values,
)
from tenants.db import project_context
from tenants.models import Organization, Project

# The namespace of the fresh ids of --new-ids (uuid5 of "<target project>:<old id>").
NEW_IDS = uuid.UUID("5b1e5d0e-6a4c-4f0e-9a57-2f1f3c6e9d21")
# Tables whose rows keep the application's ids: a kept id elsewhere is a conflict.
_KEPT_IDS = (EVENT, MEMORY, HISTORY, FEEDBACK)
_ID_FIELDS = {
    EVENT: ("id",),
    MEMORY: ("id", "replaced_by_id", "source_event_id", "conversation_id"),
    HISTORY: ("id", "memory_id", "event_id"),
    FEEDBACK: ("id", "memory_id"),
    SUMMARY: ("id",),
    ENTITY_LINK: ("memory_id",),
}


class TransferConflictError(Exception):
    """A kept id is another project's on this instance: the batch was not written."""


@dataclass
class Target:
    """Where an import writes, and what it has learnt from the file so far."""

    project_id: uuid.UUID
    dimensions: int
    new_ids: bool = False
    # The file's vectors are another model's: embed the texts again.
    reembed: bool = False
    # A check run inside a transaction its caller rolls back: no embedding.
    dry_run: bool = False
    # Link the memories written to the entities they name, as an add does (a source whose file
    # holds no entity links: import_mem0).
    link_entities: bool = False
    vertex_ids: dict[int, int] = field(default_factory=dict)
    edge_ids: dict[int, int] = field(default_factory=dict)

    def uid(self, old: uuid.UUID | None) -> uuid.UUID | None:
        if old is None or not self.new_ids:
            return old
        return uuid.uuid5(NEW_IDS, f"{self.project_id}:{old}")

    def uid_text(self, old: Any) -> Any:
        """An id written as text in JSON (an edge's memory_ids, an event's results)."""
        if not self.new_ids or not isinstance(old, str) or not old:
            return old
        try:
            return str(self.uid(uuid.UUID(old)))
        except ValueError:
            return old


@dataclass
class Outcome:
    written: int = 0
    skipped: int = 0


def do_prepare_project(
    *,
    organization: str | None = None,
    name: str | None = None,
    project_id: uuid.UUID | None = None,
    source: Mapping[str, Any] | None = None,
    keep_id: bool = False,
) -> tuple[Project, bool]:
    """The target project, by id or by organization/name; by name it is created if missing,
    with the source project's settings, and (keep_id) the source's id when this instance has
    no project of that id. (project, created)."""
    if project_id is not None:
        return Project.objects.select_related("organization").get(pk=project_id), False
    if not organization or not name:
        raise ValueError("a target project needs its id, or its organization and name")
    for what, value, model in (
        ("organization", organization, Organization),
        ("name", name, Project),
    ):
        limit = model._meta.get_field("name").max_length or 0
        if len(value) > limit or text_problem(value):
            raise ValueError(f"a project's {what} has 1 to {limit} characters of text")
    with transaction.atomic():
        org, _ = Organization.objects.get_or_create(name=organization)
        found = Project.objects.filter(organization=org, name=name).first()
        if found is not None:
            return found, False
        settings = dict(source or {})
        wanted = _project_id(settings.get("id")) if keep_id else None
        if wanted is not None and Project.objects.filter(pk=wanted).exists():
            wanted = None
        project = Project.objects.create(
            **({"id": wanted} if wanted is not None else {}),
            organization=org,
            name=name,
            **_project_settings(settings),
        )
    return project, True


def _project_id(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _project_settings(source: Mapping[str, Any]) -> dict[str, Any]:
    """The source project's settings an import copies into a project it creates (checked)."""
    found: dict[str, Any] = {}
    for key in ("description", "custom_instructions", "includes", "excludes"):
        if isinstance(source.get(key), str):
            found[key] = source[key].replace("\x00", "")
    if isinstance(source.get("custom_categories"), list):
        found["custom_categories"] = source["custom_categories"]
    for key in ("deleted_retention_days", "event_retention_days"):
        value = source.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
            found[key] = value
    return found


def do_import_batch(target: Target, kind: str, records: Sequence[Mapping[str, Any]]) -> Outcome:
    """Write one batch of records of one type in one transaction; what it wrote and skipped.

    FormatError: a record is not valid, or the database refuses one (nothing of the batch
    written). Embeds first (outside any transaction) when the target re-embeds."""
    try:
        if kind in (ENTITY, RELATION):
            with project_context(target.project_id):
                _importing()
                return _load_graph(target, kind, records)
        vectors = not target.reembed
        rows = [row_values(kind, r, dimensions=target.dimensions, vectors=vectors) for r in records]
        if target.reembed:
            _embed(target, kind, rows)
        with project_context(target.project_id):
            _importing()
            return _load_rows(target, kind, rows)
    except DatabaseError as error:
        if not _refused(error):
            raise
        detail = str(error).strip().splitlines()[0][:300]
        raise FormatError(f"the database refuses one of these {kind} records ({detail})") from None


# SQLSTATE classes of an error a value causes (a data exception, a constraint, a limit such as an
# index entry's size), as against a connection, a lock or the server going away.
_VALUE_ERRORS = ("22", "23", "54")


def _refused(error: DatabaseError) -> bool:
    state = getattr(error.__cause__, "sqlstate", None) or ""
    return state[:2] in _VALUE_ERRORS


def _importing() -> None:
    """Mark this transaction an import's: the history it writes happened elsewhere, and
    reports nothing to webhooks (webhooks migration 0001)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('engram.importing', 'on', true)")


def _embed(target: Target, kind: str, rows: list[dict[str, Any]]) -> None:
    """Vectors for `rows` from this instance's embedder (zeros in a dry run, and for a
    redacted memory, whose text is gone)."""
    zero = [0.0] * target.dimensions
    if kind == MEMORY:
        texts = sorted({r["text"] for r in rows if r["state"] != Memory.State.REDACTED})
        found = dict(zip(texts, embed(texts), strict=True)) if texts and not target.dry_run else {}
        for row in rows:
            vector = found.get(row["text"])
            row["embedding"] = zero if vector is None else [float(x) for x in vector]
    elif kind == ENTITY_VECTOR:
        names = sorted({r["entity_name"] for r in rows})
        words = dict(zip(names, embed_words(names), strict=True)) if not target.dry_run else {}
        for row in rows:
            vector = words.get(row["entity_name"])
            row["embedding"] = zero if vector is None else [float(x) for x in vector]


def _load_graph(target: Target, kind: str, records: Sequence[Mapping[str, Any]]) -> Outcome:
    outcome = Outcome()
    for record in records:
        try:
            old = _graph_id(record.get("id"))
            properties = json_checked(record["properties"], f"{kind} properties")
            if not isinstance(properties, dict):
                raise TypeError("properties must be an object")
            if kind == ENTITY:
                new, written = load_entity(target.project_id, properties)
                target.vertex_ids[old] = new
            else:
                start = target.vertex_ids[_graph_id(record.get("start"))]
                end = target.vertex_ids[_graph_id(record.get("end"))]
                properties = _edge_properties(target, properties)
                new, written = load_relation(target.project_id, start, end, properties)
                target.edge_ids[old] = new
        except KeyError as error:
            raise FormatError(
                f"a {kind} record refers to an unknown entity or lacks {error}"
            ) from None
        except UnsafeInputError as error:  # says where itself
            raise FormatError(str(error).rstrip(".")) from None
        except (TypeError, ValueError) as error:
            raise FormatError(f"{kind}: {error}") from None
        outcome.written += written
        outcome.skipped += not written
    return outcome


def _graph_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError("a graph id must be a non-negative integer")
    return int(value)


def _edge_properties(target: Target, properties: dict[str, Any]) -> dict[str, Any]:
    memory_ids = properties.get("memory_ids", [])
    if not isinstance(memory_ids, list):
        raise TypeError("memory_ids must be a list")
    return properties | {
        "memory_ids": [target.uid_text(m) for m in memory_ids],
        "event_id": target.uid_text(properties.get("event_id", "")),
    }


def _load_rows(target: Target, kind: str, rows: list[dict[str, Any]]) -> Outcome:
    model, fields = MODEL_FIELDS[kind]
    for row in rows:
        for name in _ID_FIELDS.get(kind, ()):
            row[name] = target.uid(row[name])
        _adjust(target, kind, row)
    objects = [model(project_id=target.project_id, **row) for row in rows]
    present = _present(target, kind, objects)
    fresh = [o for o in objects if _natural_key(kind, o) not in present]
    # Two records of one row in the file: the first counts.
    unique = list({_natural_key(kind, o): o for o in reversed(fresh)}.values())[::-1]
    if kind == MEMORY:
        fields = (*fields, "language")
    columns = [model._meta.get_field("project"), *(_field(model, name) for name in fields)]
    if unique:
        model._base_manager._insert(  # type: ignore[attr-defined]
            unique, fields=columns, raw=True, on_conflict=OnConflict.IGNORE
        )
    if kind in _KEPT_IDS and unique:
        ids = [o.pk for o in unique]
        mine = model._base_manager.filter(project_id=target.project_id, pk__in=ids)
        there = set(mine.values_list("pk", flat=True))
        missing = [str(i) for i in ids if i not in there]
        if missing:
            raise TransferConflictError(
                f"{kind} {missing[0]} (and {len(missing) - 1} more of this batch) exists already "
                "in another project of this instance; import with --new-ids to copy the project "
                "under fresh ids."
            )
    if target.link_entities and kind == MEMORY and not target.dry_run:
        schedule_entity_linking(target.project_id, [o.pk for o in unique])
    if target.dry_run:
        # Deferred foreign keys (a memory's replaced_by, feedback's memory) are checked now.
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        except IntegrityError as error:
            detail = str(error).splitlines()[0]
            raise FormatError(
                f"a {kind} record refers to a row the file does not hold ({detail})"
            ) from None
    return Outcome(written=len(unique), skipped=len(objects) - len(unique))


def _field(model: type[models.Model], attname: str) -> models.Field[Any, Any]:
    return next(f for f in model._meta.concrete_fields if f.attname == attname)


def _adjust(target: Target, kind: str, row: dict[str, Any]) -> None:
    """What an import changes in a row besides its ids."""
    if kind == EVENT:
        # A running event's worker is on the other instance: the sweeper here sends it again.
        if row["status"] == MemoryEvent.Status.RUNNING:
            row["status"] = MemoryEvent.Status.PENDING
        row["results"] = _remap_ids(target, row["results"])
        row["reversal"] = _remap_ids(target, row["reversal"])
        row["graph"] = _remap_edges(target, row["graph"])
    elif kind == MEMORY:
        # Worked out again here, as the embedding is (not in the file).
        row["language"] = detect(row["text"])
        if row["seq"] is None:
            # A source that has no insertion order (import_mem0): this instance's next.
            with connection.cursor() as cursor:
                cursor.execute("SELECT nextval('memory_memory_seq')")
                row["seq"] = cursor.fetchone()[0]
    elif kind == ENTITY_LINK and row["vertex_id"] is not None:
        row["vertex_id"] = target.vertex_ids.get(row["vertex_id"])


def _remap_ids(target: Target, value: Any) -> Any:
    """Memory ids named in an event's JSON (results, reversal): under "id" and "memory_id"."""
    if not target.new_ids:
        return value
    if isinstance(value, list):
        return [_remap_ids(target, v) for v in value]
    if isinstance(value, dict):
        return {
            k: target.uid_text(v) if k in ("id", "memory_id") else _remap_ids(target, v)
            for k, v in value.items()
        }
    return value


def _remap_edges(target: Target, summary: Any) -> Any:
    """An event's graph summary names edges by id ("added", "invalidated"): the new ids; an
    edge the file does not hold loses its id (it would name another edge here)."""
    if not isinstance(summary, dict):
        return summary
    remapped = dict(summary)
    for key in ("added", "invalidated"):
        items = summary.get(key)
        if not isinstance(items, list):
            continue
        remapped[key] = []
        for item in items:
            if isinstance(item, dict) and "id" in item:
                old = item["id"]
                new = target.edge_ids.get(old) if isinstance(old, int) else None
                kept = {k: v for k, v in item.items() if k != "id"}
                remapped[key].append(kept if new is None else kept | {"id": new})
            else:
                remapped[key].append(item)
    return remapped


def _natural_key(kind: str, row: models.Model) -> Any:
    if kind == ENTITY_LINK:
        return (row.memory_id, row.entity_name)  # type: ignore[attr-defined]
    if kind in (ENTITY_VECTOR, SUMMARY):
        key = (row.user_id, row.agent_id, row.app_id, row.run_id)  # type: ignore[attr-defined]
        return (*key, row.entity_name) if kind == ENTITY_VECTOR else key  # type: ignore[attr-defined]
    return row.pk


def _present(target: Target, kind: str, rows: Sequence[models.Model]) -> set[Any]:
    """The natural keys of `rows` the target project has already."""
    if not rows:
        return set()
    model = type(rows[0])
    mine = model._base_manager.filter(project_id=target.project_id)
    if kind == ENTITY_LINK:
        memories = {r.memory_id for r in rows}  # type: ignore[attr-defined]
        return set(
            MemoryEntity.objects.filter(
                project_id=target.project_id, memory_id__in=memories
            ).values_list("memory_id", "entity_name")
        )
    if kind in (ENTITY_VECTOR, SUMMARY):
        names = ("user_id", "agent_id", "app_id", "run_id")
        extra = ("entity_name",) if kind == ENTITY_VECTOR else ()
        users = {r.user_id for r in rows}  # type: ignore[attr-defined]
        query = mine.filter(user_id__in=[u for u in users if u is not None])
        if None in users:
            query = query | mine.filter(user_id__isnull=True)
        return set(query.values_list(*names, *extra))
    return set(mine.filter(pk__in=[r.pk for r in rows]).values_list("pk", flat=True))


__all__ = [
    "NEW_IDS",
    "Outcome",
    "Target",
    "TransferConflictError",
    "do_import_batch",
    "do_prepare_project",
]
