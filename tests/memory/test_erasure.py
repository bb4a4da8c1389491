"""GDPR erasure (issue #10): one user of one project, gone from every table of the database.

A distinctive string is planted for one user in every store, through the API where there is
one (memories with infer=false and true, history by an update and a delete, feedback, an
export, access-log rows naming the user in the scope and in the path) and directly where
there is none (a scope summary; the user's entities and a relation in the project's graph).
The same text is planted for another user of the same project and for the same user id in
another project. After `purge_user`, a scan of every table of the database, as the owner role
in every tenant context, finds the string only in the other copies, unchanged.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from psycopg import sql

from audit.models import AccessLog, PurgeRecord
from memory import graph
from memory.actions import do_erase_user, erasure_subject_hash
from memory.models import (
    Feedback,
    IdempotentRequest,
    Memory,
    MemoryEntity,
    MemoryEvent,
    MemoryExport,
    MemoryHistory,
    ProfileJob,
    ScopeSummary,
    UserProfile,
)
from tenants.actions import NewApiKey
from tenants.db import project_context
from tests.factory import auth, make_key

pytestmark = pytest.mark.usefixtures("committed_db")

MARK = "zebra-7f3a"
SUBJECT = MARK  # the user to erase: the string is its id, and in its texts
OTHER = "okapi-2c9d"  # another user of the same project, with the same texts
TEXT = f"Keeps the {MARK} notebook in the blue drawer"
STORES = {
    "memories", "feedback", "entity_links", "graph_entities", "graph_relations", "history",
    "summaries", "events", "queue_messages", "exports", "idempotency", "profiles",
    "profile_jobs", "access_log",
}  # fmt: skip

Row = tuple[str, str, str]  # (table, tenant the row was seen in or "-", the row as text)


@dataclass
class World:
    alice: NewApiKey  # acme/main: SUBJECT and OTHER
    charlie: NewApiKey  # globex/main: the same user id, SUBJECT
    events: list[str] = field(default_factory=list)

    @property
    def project(self) -> uuid.UUID:
        return self.alice.key.project_id


def call(client: Any, key: NewApiKey, method: str, path: str, body: Any = None) -> Any:
    response = getattr(client, method)(
        path, body, content_type="application/json", headers=auth(key.raw)
    )
    assert response.status_code < 300, (path, response.status_code, response.content[:500])
    return response.json()


def plant(client: Any, world: World, key: NewApiKey, user: str) -> None:
    """The text in every store, for `user` of `key`'s project."""
    call(client, key, "delete", f"/v2/entities/user/{user}/")  # the path names the user
    meta = {"notebook": MARK}
    first = call(client, key, "post", "/v1/memories/", {
        "messages": [{"role": "user", "content": TEXT}], "user_id": user, "infer": False,
        "metadata": meta})  # fmt: skip
    memory_id = first["results"][0]["id"]
    second = call(client, key, "post", "/v1/memories/", {
        "messages": f"A second {MARK} fact", "user_id": user, "agent_id": "bot",
        "infer": False})  # fmt: skip
    changed = second["results"][0]["id"]
    # Its answer (the memory, text included) is kept for replays of the Idempotency-Key.
    kept = client.post("/v1/memories/", {"messages": f"A kept {MARK} answer", "user_id": user,
                                         "infer": False}, content_type="application/json",
                       headers={**auth(key.raw), "Idempotency-Key": f"kept-{user}"})  # fmt: skip
    assert kept.status_code == 200, kept.content
    call(client, key, "put", f"/v1/memories/{changed}/", {"text": f"An updated {MARK} fact"})
    call(client, key, "delete", f"/v1/memories/{changed}/")
    queued = call(client, key, "post", "/v3/memories/add/", {
        "messages": [{"role": "user", "content": f"{TEXT}, says {user}"}], "user_id": user,
        "run_id": "r1"})  # fmt: skip
    world.events.append(queued["event_id"])
    call(client, key, "post", "/v1/feedback/", {
        "memory_id": memory_id, "feedback": "POSITIVE",
        "feedback_reason": f"{user} says the {MARK} memory is right"})  # fmt: skip
    call(client, key, "post", "/v1/exports/", {"filters": {"user_id": user}})
    call(client, key, "get", f"/v1/memories/?user_id={user}")
    either = {"OR": [{"user_id": user}, {"agent_id": "bot"}]}
    call(client, key, "post", "/v2/memories/search/", {"query": "notebook", "filters": either})
    with project_context(key.key.project_id):
        ScopeSummary.objects.create(
            project_id=key.key.project_id, user_id=user, text=f"{user} keeps a {MARK} notebook"
        )
        # The graph's relational index (memory.graph writes it during extraction).
        MemoryEntity.objects.create(
            project_id=key.key.project_id, memory_id=memory_id, entity_name=f"{MARK} notebook",
            user_id=user,
        )  # fmt: skip
    # The user's profile, built from their memories, and a profile job naming them.
    with project_context(key.key.project_id):
        UserProfile.objects.create(
            project_id=key.key.project_id, user_id=user, profile={"notebook": f"{MARK} notebook"},
            memory_ids=[memory_id], status="succeeded",
        )  # fmt: skip
        ProfileJob.objects.create(
            project_id=key.key.project_id, operation="trigger", entity_ids=[user],
            idempotency_key=f"profile-{uuid.uuid4().hex}",
        )  # fmt: skip
    # The graph: the user's entities and a relation the first memory asserts.
    graph.upsert_relation(
        key.key.project_id, user, "keeps", f"the {MARK} notebook", graph.Scope(user_id=user),
        memory_id=memory_id,
    )  # fmt: skip


@pytest.fixture
def world(client: Any) -> Iterator[World]:
    made = World(alice=make_key("acme", "main"), charlie=make_key("globex", "main"))
    for key, user in ((made.alice, SUBJECT), (made.alice, OTHER), (made.charlie, SUBJECT)):
        plant(client, made, key, user)
    yield made
    with connection.cursor() as cursor:  # the queue is not flushed between tests
        cursor.execute(
            "DELETE FROM dramatiq.queue WHERE message->'args'->>0 = ANY(%s)", [made.events]
        )


def owner_connection() -> psycopg.Connection[Any]:
    """A connection to the test database as the owner role (autocommit)."""
    db = connection.settings_dict
    owner = settings.ENGRAM_DB_OWNER or {"USER": db["USER"], "PASSWORD": db["PASSWORD"]}
    params = {"dbname": db["NAME"], "user": owner["USER"], "password": owner["PASSWORD"],
              "host": db.get("HOST") or None, "port": db.get("PORT") or None}  # fmt: skip
    return psycopg.connect(**{k: v for k, v in params.items() if v}, autocommit=True)


def scan(needle: str = MARK) -> set[Row]:
    """Every row of every table of the database whose text holds `needle`, read as the owner.

    The owner is subject to row-level security too (forced), so tables under it are read in
    every tenant context, and outside any.
    """
    found: set[Row] = set()
    with owner_connection() as owner_db:
        catalog = owner_db.execute(
            "SELECT n.nspname, c.relname, c.relrowsecurity, has_table_privilege(c.oid, 'SELECT') "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p') "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg\\_%' ORDER BY 1, 2"
        ).fetchall()
        # Apache AGE's own catalog (graph and label names) is the extension's, not the owner's.
        assert {schema for schema, _, _, readable in catalog if not readable} <= {"ag_catalog"}
        tables = [(schema, table, rls) for schema, table, rls, readable in catalog if readable]
        names = {(schema, table) for schema, table, _ in tables}
        assert ("dramatiq", "queue") in names
        assert ("public", "memory_memory") in names
        projects = [str(p) for (p,) in owner_db.execute("SELECT id FROM tenants_project")]
        for schema, table, rls in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} t WHERE t::text ILIKE %s").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            for tenant in ["", *projects] if rls else [""]:
                with owner_db.transaction():
                    owner_db.execute("SELECT set_config('engram.project_id', %s, true)", [tenant])
                    rows = owner_db.execute(query, [f"%{needle}%"]).fetchall()
                found |= {(table, tenant or "-", text) for (text,) in rows}
    return found


def others(rows: set[Row], world: World) -> set[Row]:
    """The rows of the copies that must survive: another project's, or the other user's."""
    elsewhere = str(world.charlie.key.project_id)
    return {r for r in rows if r[1] == elsewhere or OTHER in r[2]}


def subjects(world: World) -> dict[str, int]:
    """The subject's rows per store, counted as the application role (the expected counts)."""
    with project_context(world.project):
        memories = list(Memory.objects.filter(user_id=SUBJECT).values_list("pk", flat=True))
        events = [str(e.pk) for e in MemoryEvent.objects.filter(user_id=SUBJECT)]
        logs = [
            row
            for row in AccessLog.objects.all()
            if SUBJECT in (row.scope.get("user_id") or []) or f"/user/{SUBJECT}/" in row.path
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM dramatiq.queue WHERE message->'args'->>0 = ANY(%s)", [events]
            )
            queued = cursor.fetchone()[0]
        entities, relations = graph_rows(world.project)
        return {
            "memories": len(memories),
            "feedback": Feedback.objects.filter(memory_id__in=memories).count(),
            "entity_links": MemoryEntity.objects.filter(user_id=SUBJECT).count(),
            "graph_entities": entities,
            "graph_relations": relations,
            "history": MemoryHistory.objects.filter(user_id=SUBJECT).count(),
            "summaries": ScopeSummary.objects.filter(user_id=SUBJECT).count(),
            "events": len(events),
            "queue_messages": queued,
            "exports": MemoryExport.objects.filter(filters__user_id=SUBJECT).count(),
            "idempotency": sum(
                any(str(m) in str(r) for m in memories)
                for r in IdempotentRequest.objects.values_list("response", flat=True)
            ),
            "profiles": UserProfile.objects.filter(user_id=SUBJECT).count(),
            "profile_jobs": ProfileJob.objects.filter(entity_ids__contains=[SUBJECT]).count(),
            "access_log": len(logs),
        }


def graph_rows(project: uuid.UUID) -> tuple[int, int]:
    """The subject's vertices, and the edges of the subject or touching them, in the project's
    graph, read as the application role (by jsonb, not as the erasure finds them)."""
    name = graph.graph_name(project)
    mine = "ag_catalog.agtype_out({}.properties)::text::jsonb ->> 'user_id' = %(user)s"
    vertices = f"SELECT v.id::text FROM {name}._ag_label_vertex v WHERE " + mine.format("v")  # noqa: S608
    edges = (
        f"SELECT count(*) FROM {name}._ag_label_edge r WHERE {mine.format('r')} "  # noqa: S608
        f"OR r.start_id::text IN ({vertices}) OR r.end_id::text IN ({vertices})"
    )
    with project_context(project), connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM ({vertices}) v", {"user": SUBJECT})  # noqa: S608
        entities = int(cursor.fetchone()[0])
        cursor.execute(edges, {"user": SUBJECT})
        relations = int(cursor.fetchone()[0])
    return entities, relations


def purge(world: World, *extra: str) -> str:
    out = io.StringIO()
    call_command(
        "purge_user", "--org", "acme", "--project", "main", "--user-id", SUBJECT, *extra,
        stdout=out,
    )  # fmt: skip
    return out.getvalue()


def records(world: World) -> list[PurgeRecord]:
    with project_context(world.project):
        return list(PurgeRecord.objects.order_by("created_at"))


def test_it_erases_the_user_from_every_table_and_keeps_the_other_copies(world: World) -> None:
    before = scan()
    planted = {table for table, tenant, text in before - others(before, world)}
    assert planted >= {
        "memory_memory", "memory_memoryhistory", "memory_feedback", "memory_memoryevent",
        "memory_scopesummary", "memory_memoryexport", "audit_accesslog", "memory_memoryentity",
        "Entity", "RELATES",
    }, planted  # fmt: skip
    expected = subjects(world)
    assert set(expected) == STORES
    assert all(expected.values()), expected  # something to erase in every store

    output = purge(world)

    after = scan()
    assert after == others(before, world), sorted(after - others(before, world))[:5]
    assert subjects(world) == dict.fromkeys(STORES, 0)
    [record] = records(world)
    assert record.counts == expected
    assert "memories: " in output and "erased " in output
    assert (record.subject_kind, record.actor) == ("user", "command:purge_user")
    assert record.subject_hash == erasure_subject_hash(world.project, "user", SUBJECT)
    assert record.project_id == world.project
    # The access log keeps the rows, with the hash where the id was.
    with project_context(world.project):
        hashed = [row for row in AccessLog.objects.all() if record.subject_hash in str(row.scope)]
        paths = AccessLog.objects.filter(path__contains=record.subject_hash).values_list(
            "path", flat=True
        )
        assert len(hashed) >= 3
        assert list(paths) == [f"/v2/entities/user/erased:{record.subject_hash}/"]


def test_it_counts_on_a_dry_run_and_changes_nothing(world: World) -> None:
    before = scan()
    expected = subjects(world)
    output = purge(world, "--dry-run")
    assert "would erase" in output
    for store, count in expected.items():
        assert f"{store}: {count}\n" in output
    assert scan() == before
    assert records(world) == []
    assert do_erase_user(world.project, SUBJECT, actor="test:dry", dry_run=True) == expected


def test_a_second_run_erases_nothing_and_still_records_it(world: World) -> None:
    first = do_erase_user(world.project, SUBJECT, actor="command:purge_user")
    assert all(first.values())
    after = scan()
    second = do_erase_user(world.project, SUBJECT, actor="command:purge_user")
    assert second == dict.fromkeys(STORES, 0)
    assert scan() == after
    assert [r.counts for r in records(world)] == [first, second]


def test_it_leaves_an_export_of_other_users_and_deletes_one_that_mixes_them(
    world: World, client: Any
) -> None:
    # Any user: the filters do not name the subject, but the result holds its memory.
    mixed = call(client, world.alice, "post", "/v1/exports/", {"filters": {"user_id": "*"}})
    with project_context(world.project):
        held = MemoryExport.objects.get(pk=mixed["id"]).result
    assert {m["user_id"] for m in held} == {SUBJECT, OTHER}
    theirs = call(client, world.alice, "post", "/v1/exports/", {"filters": {"user_id": OTHER}})
    do_erase_user(world.project, SUBJECT, actor="test:exports")
    with project_context(world.project):
        left = set(MemoryExport.objects.values_list("pk", flat=True))
    assert uuid.UUID(theirs["id"]) in left
    assert uuid.UUID(mixed["id"]) not in left


def test_the_app_role_still_cannot_change_the_append_only_tables(world: World) -> None:
    do_erase_user(world.project, SUBJECT, actor="test:grants")
    for table in ("audit_accesslog", "memory_memoryhistory", "audit_purgerecord"):
        for statement in (f"UPDATE {table} SET project_id = project_id", f"DELETE FROM {table}"):  # noqa: S608
            with (
                pytest.raises(DatabaseError, match="permission denied"),
                project_context(world.project),
                connection.cursor() as cursor,
            ):
                # The erasure's flag does not open the door to anyone else.
                cursor.execute("SELECT set_config('engram.erasing', 'on', true)")
                cursor.execute(statement)


def test_it_erases_only_in_the_callers_tenant(world: World) -> None:
    subject = erasure_subject_hash(world.project, "user", SUBJECT)
    for tenant in (world.charlie.key.project_id, None):
        with (
            pytest.raises(DatabaseError, match="tenant context"),
            transaction.atomic(),
            project_context(tenant),
            connection.cursor() as cursor,
        ):
            cursor.execute(
                "SELECT engram_erase_user(%s, %s, %s, %s, false)",
                [world.project, SUBJECT, subject, "test"],
            )
    with project_context(world.project), connection.cursor() as cursor:
        for bad_hash, actor in ((MARK, "test"), (subject, "")):
            with pytest.raises(DatabaseError, match="engram_erase_user"), transaction.atomic():
                cursor.execute(
                    "SELECT engram_erase_user(%s, %s, %s, %s, false)",
                    [world.project, SUBJECT, bad_hash, actor],
                )
    assert records(world) == []


def test_the_command_refuses_an_unknown_project(world: World) -> None:
    with pytest.raises(CommandError, match="No project"):
        call_command("purge_user", "--org", "acme", "--project", "nope", "--user-id", SUBJECT)


def test_the_owner_itself_is_refused_outside_the_erasure_function(world: World) -> None:
    do_erase_user(world.project, SUBJECT, actor="test:owner")  # a purge record to refuse
    tenant = "SELECT set_config('engram.project_id', %s, true)"
    with owner_connection() as owner_db:
        for table in ("audit_accesslog", "memory_memoryhistory", "audit_purgerecord"):
            for statement in ("UPDATE {} SET project_id = project_id", "DELETE FROM {}"):
                if table == "audit_accesslog" and statement.startswith("DELETE"):
                    continue  # no DELETE policy: row-level security lets no row through
                with pytest.raises(psycopg.Error, match="append-only"), owner_db.transaction():
                    owner_db.execute(tenant, [str(world.project)])
                    owner_db.execute(sql.SQL(statement).format(sql.Identifier(table)))
        # The purge records refuse even the erasure's flag.
        with pytest.raises(psycopg.Error, match="append-only"), owner_db.transaction():
            owner_db.execute(tenant, [str(world.project)])
            owner_db.execute("SELECT set_config('engram.erasing', 'on', true)")
            owner_db.execute("DELETE FROM audit_purgerecord")
