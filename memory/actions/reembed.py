"""The writes of an embedding switch (`manage.py reembed`): a new model's vectors are built
beside the current ones, then take their place in one short transaction.

1. `do_begin`: the target model is recorded as the `building` space (memory.models.embedding).
2. `do_write_memories` / `do_write_entities` / `do_write_redacted`: its vectors go into the
   `embedding_next` twins, one batch of one project per transaction (tenant context on). A
   memory's vector is written only if its text is still the one embedded (its hash); a vector
   written to `embedding` meanwhile clears the twin (the trigger of memory 0027), so a memory
   changed during the build is built again. Search reads `embedding` all along.
3. `do_build_index`: the HNSW index on `(embedding_next::vector(N))`, built CONCURRENTLY (reads
   and writes go on), as the schema's owner.
4. `do_switch`: in one transaction, as the owner, holding both tables for its length: the rows
   written since the last pass get their vectors (`fill`), then the columns and indexes trade
   names (the old vectors dropped, an empty twin added: no table rewrite, and no scan: the
   new `embedding` is not declared NOT NULL again, though no row lacks it and engram never
   writes one without), and the spaces trade states. Running processes follow within
   ENGRAM_EMBEDDING_CHECK_SECONDS (memory.text.embeddings); `do_write_current` then embeds
   again, in the new model, what a process wrote before it followed.
`do_abandon` drops a build that is not wanted.

May import memory.models, memory.text and tenants.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from memory.models import EmbeddingSpace
from memory.text.embeddings import Space, Vectors
from memory.text.query import literal
from tenants.db import project_context

NEXT_INDEX = "memory_embedding_next_hnsw"
TABLES = ("memory_memory", "memory_entityvector")
# How long the switch waits for the tables (transactions in flight) before it gives up and tries
# again: queries queue behind a waiting lock.
LOCK_TIMEOUT = "3s"
# A redacted memory's vector of N dimensions, and so its twin: zeros (its text is gone).
_ZEROS = "array_fill(0::real, ARRAY[%s])::vector"


# A vector written to `embedding` clears its twin (memory migration 0027's trigger and function).
WRITTEN_TRIGGER = (
    "CREATE TRIGGER {table}_embedding_written BEFORE INSERT OR UPDATE OF embedding ON {table} "
    "FOR EACH ROW EXECUTE FUNCTION engram_embedding_written()"
)


class SwitchError(RuntimeError):
    """The switch cannot be made (another build is under way, the index is missing, ...)."""


class WrittenMeanwhile(RuntimeError):  # noqa: N818 - a state, not an error to report
    """More rows were written since the last pass than the switch embeds while it holds the
    tables: nothing was switched; another pass first (outside the lock), then again."""


# At most this many vectors are made while the switch holds the tables (reads wait meanwhile).
MAX_WHILE_HELD = 200


def do_begin(target: Space) -> EmbeddingSpace:
    """Record `target` as the space being built, or resume its build; refuse when another
    model's build is under way (`do_abandon` first)."""
    with transaction.atomic():
        building = EmbeddingSpace.objects.select_for_update().filter(state="building").first()
        if building is not None:
            if building.name != target.name or building.dimensions != target.dimensions:
                raise SwitchError(
                    f"A switch to {building.name} ({building.dimensions} dimensions) is under "
                    "way: finish it with its settings, or run `reembed --abandon` first."
                )
            return building
        return EmbeddingSpace.objects.create(
            name=target.name,
            embedder=target.embedder,
            url=target.url,
            model=target.model,
            dimensions=target.dimensions,
            send_dimensions=target.send_dimensions,
            state="building",
        )


def _vectors(ids: Sequence[Any], vectors: Iterable[Any]) -> tuple[list[Any], list[str]]:
    return [str(i) for i in ids], [literal(v) for v in vectors]


def do_write_memories(
    project_id: uuid.UUID, rows: Sequence[tuple[Any, str]], vectors: Vectors
) -> int:
    """Write the twins of memories (id, the hash of the text embedded); returns how many."""
    ids, literals = _vectors([r[0] for r in rows], vectors)
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_memory m SET embedding_next = v.e::vector "
            "FROM unnest(%s::uuid[], %s::text[], %s::text[]) AS v(id, hash, e) "
            "WHERE m.project_id = %s AND m.id = v.id AND m.hash = v.hash "
            "AND m.embedding_next IS NULL",
            [ids, [r[1] for r in rows], literals, project_id],
        )
        return int(cursor.rowcount)


def do_write_entities(project_id: uuid.UUID, ids: Sequence[int], vectors: Vectors) -> int:
    """Write the twins of entity names; returns how many."""
    _, literals = _vectors(ids, vectors)
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_entityvector x SET embedding_next = v.e::vector "
            "FROM unnest(%s::bigint[], %s::text[]) AS v(id, e) "
            "WHERE x.project_id = %s AND x.id = v.id AND x.embedding_next IS NULL",
            [list(ids), literals, project_id],
        )
        return int(cursor.rowcount)


def do_write_redacted(project_id: uuid.UUID, dimensions: int) -> int:
    """A redacted memory's twin is zeros, as its vector is (its text is gone for good)."""
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE memory_memory SET embedding_next = {_ZEROS} "  # noqa: S608 - a constant
            "WHERE project_id = %s AND state = 'redacted' AND embedding_next IS NULL",
            [dimensions, project_id],
        )
        return int(cursor.rowcount)


def do_write_current(
    project_id: uuid.UUID,
    memories: Sequence[tuple[Any, str]],
    memory_vectors: Vectors,
    entity_ids: Sequence[int],
    entity_vectors: Iterable[Any],
) -> None:
    """Write vectors of the current space over what a process wrote before it followed a
    switch (the memory's text unchanged)."""
    ids, literals = _vectors([m[0] for m in memories], memory_vectors)
    entities, entity_literals = _vectors(entity_ids, entity_vectors)
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_memory m SET embedding = v.e::vector "
            "FROM unnest(%s::uuid[], %s::text[], %s::text[]) AS v(id, hash, e) "
            "WHERE m.project_id = %s AND m.id = v.id AND m.hash = v.hash",
            [ids, [m[1] for m in memories], literals, project_id],
        )
        cursor.execute(
            "UPDATE memory_entityvector x SET embedding = v.e::vector "
            "FROM unnest(%s::bigint[], %s::text[]) AS v(id, e) "
            "WHERE x.project_id = %s AND x.id = v.id",
            [[int(i) for i in entities], entity_literals, project_id],
        )


@contextmanager
def owner_connection(*, autocommit: bool) -> Iterator[psycopg.Connection[Any]]:
    """A connection as the schema's owner (DATABASE_OWNER_URL's role; else the application's)
    to the application's database."""
    db = connection.settings_dict
    role = settings.ENGRAM_DB_OWNER or db
    with psycopg.connect(
        dbname=db["NAME"],
        user=role["USER"],
        password=role["PASSWORD"],
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        autocommit=autocommit,
    ) as owner:
        yield owner


def do_build_index(dimensions: int) -> None:
    """The HNSW index of the twins, built without blocking reads or writes (an invalid one left
    by an interrupted build is dropped and built again)."""
    with owner_connection(autocommit=True) as owner:
        valid = owner.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s",
            [NEXT_INDEX],
        ).fetchone()
        if valid is not None and not valid[0]:
            owner.execute(f"DROP INDEX CONCURRENTLY {NEXT_INDEX}")
            valid = None
        if valid is None:
            owner.execute(
                f"CREATE INDEX CONCURRENTLY {NEXT_INDEX} ON memory_memory USING hnsw "
                f"((embedding_next::vector({int(dimensions)})) vector_cosine_ops) "
                "WITH (m = 16, ef_construction = 64) WHERE state = 'active'"
            )


# What the last rows without a twin are, in every project (row-level security is lifted for
# the switch's transaction, which holds the tables alone).
_MISSING_MEMORIES = (
    "SELECT id, text FROM memory_memory WHERE embedding_next IS NULL AND state <> 'redacted'"
)
_ZEROS_FOR_REDACTED = (
    f"UPDATE memory_memory SET embedding_next = {_ZEROS} "  # noqa: S608 - constants
    "WHERE state = 'redacted' AND embedding_next IS NULL"
)
_MISSING_ENTITIES = "SELECT id, entity_name FROM memory_entityvector WHERE embedding_next IS NULL"


@dataclass(frozen=True)
class Switched:
    started: datetime  # what was written from then on may be a stale process's
    held: float  # seconds the tables were held (reads and writes waited)


def do_switch(target: EmbeddingSpace, embed: Callable[[list[str]], Vectors]) -> Switched:
    """Make `target` the current space (what was written from `started` on may come from a
    process that had not yet followed: `do_write_current`)."""
    started = timezone.now()
    with owner_connection(autocommit=False) as owner:
        owner.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        owner.execute("LOCK TABLE memory_memory, memory_entityvector IN ACCESS EXCLUSIVE MODE")
        locked = time.perf_counter()
        ready = owner.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s",
            [NEXT_INDEX],
        ).fetchone()
        if ready is None or not ready[0]:
            raise SwitchError("The new vectors' index is missing: run reembed again.")
        for table in TABLES:
            owner.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        _fill_last(owner, target.dimensions, embed)
        for table in TABLES:
            # The trigger that clears a twin names the column: dropped and made again.
            owner.execute(f"DROP TRIGGER {table}_embedding_written ON {table}")
            owner.execute(f"ALTER TABLE {table} RENAME COLUMN embedding TO embedding_retired")
            owner.execute(f"ALTER TABLE {table} RENAME COLUMN embedding_next TO embedding")
            owner.execute(f"ALTER TABLE {table} DROP COLUMN embedding_retired")
            owner.execute(f"ALTER TABLE {table} ADD COLUMN embedding_next vector")
            owner.execute(WRITTEN_TRIGGER.format(table=table))
            owner.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        owner.execute("ALTER TABLE memory_memory ALTER COLUMN embedding_next SET STORAGE MAIN")
        # Dropping the old column dropped its index.
        owner.execute(f"ALTER INDEX {NEXT_INDEX} RENAME TO memory_embedding_hnsw")
        owner.execute("UPDATE memory_embeddingspace SET state = 'retired' WHERE state = 'current'")
        owner.execute(
            "UPDATE memory_embeddingspace SET state = 'current', switched_at = now() WHERE id = %s",
            [target.pk],
        )
        owner.commit()
    return Switched(started, time.perf_counter() - locked)


def _fill_last(
    owner: psycopg.Connection[Any], dimensions: int, embed: Callable[[list[str]], Vectors]
) -> None:
    """Vectors for the rows written since the last pass (few: the tables are held meanwhile;
    more than MAX_WHILE_HELD give up the switch, WrittenMeanwhile)."""
    memories = owner.execute(_MISSING_MEMORIES).fetchall()
    entities = owner.execute(_MISSING_ENTITIES).fetchall()
    if len(memories) + len(entities) > MAX_WHILE_HELD:
        raise WrittenMeanwhile
    owner.execute(_ZEROS_FOR_REDACTED, [dimensions])
    if memories:
        vectors = embed([m[1] for m in memories])
        for (memory_id, _), vector in zip(memories, vectors, strict=True):
            owner.execute(
                "UPDATE memory_memory SET embedding_next = %s::vector WHERE id = %s",
                [literal(vector), memory_id],
            )
    if entities:
        for (entity_id, _), vector in zip(entities, embed([e[1] for e in entities]), strict=True):
            owner.execute(
                "UPDATE memory_entityvector SET embedding_next = %s::vector WHERE id = %s",
                [literal(vector), entity_id],
            )


def do_abandon() -> bool:
    """Drop the build under way (its space, its index, its vectors); False when there is none."""
    building = EmbeddingSpace.objects.filter(state="building").first()
    with owner_connection(autocommit=True) as owner:
        owner.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NEXT_INDEX}")
    if building is None:
        return False
    with owner_connection(autocommit=False) as owner:
        for table in TABLES:
            owner.execute(f"ALTER TABLE {table} DROP COLUMN embedding_next")
            owner.execute(f"ALTER TABLE {table} ADD COLUMN embedding_next vector")
        owner.execute("ALTER TABLE memory_memory ALTER COLUMN embedding_next SET STORAGE MAIN")
        owner.execute("DELETE FROM memory_embeddingspace WHERE id = %s", [building.pk])
        owner.commit()
    return True
