"""Backup and restore, rehearsed (issue #24 §3): docs/operations.md's procedure with real processes.

A source cluster (tests/faults/db_cluster.py) serves engram through gunicorn and a Dramatiq
worker (the offline extractor: no Claude key). Two projects are filled through the HTTP API:
memories the worker extracts, with their relations in each project's AGE graph; memories
stored verbatim, then edited (history); the same user id in both projects. The database is
dumped as docs/operations.md says (`pg_dump -Fc` as the backup role), then restored into a fresh
cluster with scripts/restore.sh as its superuser (after dropping the empty database the
cluster's set-up made, as on a fresh docker volume) and migrated as the owner. gunicorn and a
worker on the restored cluster, with the source's API keys, then search, traverse the graph,
add (which writes the graph), read across tenants (nothing) and erase a user through the API.

The restored database holds the same rows, policies, owners, SECURITY DEFINER functions,
grants, triggers and sequence positions as the source, and AGE's catalog names each graph by
its schema's oid there. The last two tests change the restored data, so they come last.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.faults.db_cluster import (
    APP,
    BIN,
    DB,
    OWNER,
    PG_BIN,
    ROOT,
    PrivateCluster,
    Server,
    app_env,
)
from tests.faults.test_database_faults import needs_root_tools

pytestmark = [needs_root_tools, pytest.mark.faults]

BACKUP = "engram_backup"
# docs/operations.md's one-time set-up of the backup role: it may read everything, past row-level
# security (the owner cannot dump: AGE's catalog is closed to it, and its tables force RLS).
BACKUP_ROLE = sql.SQL("CREATE ROLE {} LOGIN BYPASSRLS PASSWORD {} IN ROLE pg_read_all_data")
CLIENT_TIMEOUT = 30.0
PROJECTS = {"a": ("faults", "main"), "b": ("other", "secret"), "new": ("later", "fresh")}
# The adds for the worker (infer=true). The offline extractor keeps each first-person
# statement as a memory and reads a relation from the user to the statement's object.
ADDS = {
    ("a", "alice"): "I live in Lyon. I work at Acme.",
    ("a", "bob"): "I work at Globex.",
    ("b", "alice"): "I live in Oslo.",
}
B_TEXTS = {"I live in Oslo.", "Alice's locker code is 4711"}  # all of project b's memories


class Worker:
    """`dramatiq config.worker --processes 1 --threads 2`, as scripts/run.sh starts it."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.log = (log_dir / "worker.log").open("ab")
        self.process = subprocess.Popen(
            [str(BIN / "dramatiq"), "config.worker", "--processes", "1", "--threads", "2"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # Dramatiq's graceful stop
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def show_logs(home: Path) -> Callable[..., None]:
    """An ExitStack exit callback: when the set-up fails, print the tail of each log in `home`
    (pytest shows it with the error) before the directory is removed."""

    def show(kind: type[BaseException] | None, *_: Any) -> None:
        if kind is not None:
            for log in sorted(home.glob("*.log")):
                print(f"--- {log.name}", log.read_text(errors="replace")[-4000:], sep="\n")

    return show


def engram_env(cluster: PrivateCluster, secret_key: str) -> dict[str, str]:
    """A process's environment on `cluster`. The restored server keeps the source's SECRET_KEY
    (the erased ids' hashes and signed links depend on it); no Claude key, so the worker
    extracts offline."""
    env = app_env(cluster, ENGRAM_SECRET_KEY=secret_key)
    return {k: v for k, v in env.items() if not k.startswith("ANTHROPIC_")}


def client(server: Server, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Token {key}"}, timeout=CLIENT_TIMEOUT
    )


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, f"{response.request.url}: {response.text[:500]}"
    return response.json()


def wait_for(read: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 90) -> Any:
    """Poll `read()` until `done(value)` or the timeout; the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def ended(status: dict[str, Any]) -> bool:
    return status["status"] in ("SUCCEEDED", "FAILED")


def add_and_wait(api: httpx.Client, user: str, text: str) -> None:
    """An add for the worker (infer=true), followed until it ends: it must succeed, graph too."""
    body = {"messages": [{"role": "user", "content": text}], "user_id": user}
    event_id = ok(api.post("/v3/memories/add/", json=body))["event_id"]
    event = wait_for(lambda: ok(api.get(f"/v1/event/{event_id}/")), ended)
    assert (event["status"], event["graph_status"]) == ("SUCCEEDED", "SUCCEEDED"), event


def add_verbatim(api: httpx.Client, user: str, text: str) -> str:
    """An add stored as given (infer=false); the memory's id."""
    body = {"messages": [{"role": "user", "content": text}], "user_id": user, "infer": False}
    return str(ok(api.post("/v1/memories/", json=body))["results"][0]["id"])


def body_of(query: str, user: str) -> dict[str, Any]:
    """A search of everything the user's scope ranks, however weakly: what a tenant can read
    is tested here, not the threshold."""
    return {"query": query, "user_id": user, "threshold": 0}


def search(api: httpx.Client, query: str, user: str) -> set[str]:
    """The texts a search (v1: a bare list) finds for `user`."""
    return {r["memory"] for r in ok(api.post("/v1/memories/search/", json=body_of(query, user)))}


def traverse(api: httpx.Client, user: str, entity: str) -> Any:
    return ok(api.post("/v1/graph/traverse/", json={"user_id": user, "entity": entity}))


def triples(relations: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(r["source"], r["relationship"], r["destination"]) for r in relations}


# --- What the database holds, read as the superuser -------------------------------------------

# Each query reads the schemas engram makes: public, dramatiq (the queue) and the graphs' (g_ and
# a project's hex id); access lists are sorted, so that only their content is compared.
_SECURITY: dict[str, str] = {
    "schemas": """
        SELECT n.nspname, pg_get_userbyid(n.nspowner),
               (SELECT array_agg(a::text ORDER BY a::text) FROM unnest(n.nspacl) a)
        FROM pg_namespace n
        WHERE n.nspname IN ('public', 'dramatiq', 'ag_catalog') OR n.nspname ~ '^g_[0-9a-f]{32}$'
    """,
    "relations": """
        SELECT n.nspname, c.relname, c.relkind, pg_get_userbyid(c.relowner), c.relrowsecurity,
               c.relforcerowsecurity,
               (SELECT array_agg(a::text ORDER BY a::text) FROM unnest(c.relacl) a)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE (n.nspname IN ('public', 'dramatiq') OR n.nspname ~ '^g_[0-9a-f]{32}$')
          AND c.relkind IN ('r', 'p', 'S', 'v', 'm')
    """,
    "column_grants": """
        SELECT n.nspname, c.relname, a.attname,
               (SELECT array_agg(x::text ORDER BY x::text) FROM unnest(a.attacl) x)
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE (n.nspname IN ('public', 'dramatiq') OR n.nspname ~ '^g_[0-9a-f]{32}$')
          AND a.attacl IS NOT NULL
    """,
    "policies": """
        SELECT schemaname, tablename, policyname, permissive, roles::text, cmd, qual, with_check
        FROM pg_policies
    """,
    # The project's own functions (not the extensions'): owner, SECURITY DEFINER, settings.
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_userbyid(p.proowner), p.prosecdef,
               p.proconfig::text,
               (SELECT array_agg(a::text ORDER BY a::text) FROM unnest(p.proacl) a)
        FROM pg_proc p
        WHERE p.pronamespace = 'public'::regnamespace AND NOT EXISTS (
            SELECT 1 FROM pg_depend d
            WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
    """,
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, tgenabled, pg_get_triggerdef(oid)
        FROM pg_trigger WHERE NOT tgisinternal
    """,
    "sequences": """
        SELECT schemaname, sequencename, last_value FROM pg_sequences
        WHERE schemaname IN ('public', 'dramatiq') OR schemaname ~ '^g_[0-9a-f]{32}$'
    """,
    # AGE's catalog without its oids: which graphs and labels, with which ids and tables.
    "age": """
        SELECT g.name, g.namespace::text, l.name, l.id, l.kind, l.relation::text, l.seq_name
        FROM ag_catalog.ag_graph g JOIN ag_catalog.ag_label l ON l.graph = g.graphid
    """,
}
_TABLES = """
    SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE (n.nspname IN ('public', 'dramatiq') OR n.nspname ~ '^g_[0-9a-f]{32}$')
      AND c.relkind = 'r'
"""
_DIGEST = sql.SQL("SELECT count(*), md5(string_agg(t::text, '|' ORDER BY t::text)) FROM {} t")


def state(cluster: PrivateCluster) -> dict[str, Any]:
    """Every security setting above, and every table's rows (a count and a digest)."""
    found: dict[str, Any] = {
        part: sorted(cluster.sql(query), key=repr) for part, query in _SECURITY.items()
    }
    tables = cluster.sql(_TABLES)
    found["rows"] = {
        f"{schema}.{table}": cluster.sql(_DIGEST.format(sql.Identifier(schema, table)).as_string())[
            0
        ]
        for schema, table in tables
    }
    return found


def project_id(cluster: PrivateCluster, project: str) -> uuid.UUID:
    [(found,)] = cluster.sql(
        "SELECT p.id FROM tenants_project p JOIN tenants_organization o "
        "ON o.id = p.organization_id WHERE o.name = %s AND p.name = %s",
        list(PROJECTS[project]),
    )
    return uuid.UUID(str(found))


def graph(project: uuid.UUID) -> str:
    """A project's AGE graph (and its schema): `g_` + the project's hex id."""
    return "g_" + project.hex


def label_table(project: uuid.UUID, label: str) -> sql.Identifier:
    return sql.Identifier(graph(project), label)


# --- The rehearsal ----------------------------------------------------------------------------


@dataclass
class Rehearsal:
    source_state: dict[str, Any]
    restored_state: dict[str, Any]
    owner_dumps: list[subprocess.CompletedProcess[str]]
    dump: Path
    restored: subprocess.CompletedProcess[str]  # scripts/restore.sh
    target: PrivateCluster
    server: Server
    keys: dict[str, str]  # project -> raw API key ("a", "b" minted on the source)
    projects: dict[str, uuid.UUID]
    bees: str  # the memory stored verbatim, then edited (project a, alice)
    locker: str  # project b's verbatim memory (its own alice)

    def api(self, project: str) -> httpx.Client:
        return client(self.server, self.keys[project])


def seed(server: Server, keys: dict[str, str]) -> tuple[str, str]:
    """Fill both projects through the API; the ids of the two verbatim memories."""
    for (project, user), text in ADDS.items():
        with client(server, keys[project]) as api:
            add_and_wait(api, user, text)
    with client(server, keys["a"]) as api:
        bees = add_verbatim(api, "alice", "Alice keeps bees on the roof")
        ok(api.put(f"/v1/memories/{bees}/", json={"text": "Alice keeps bees in the garden"}))
    with client(server, keys["b"]) as api:
        locker = add_verbatim(api, "alice", "Alice's locker code is 4711")
    return bees, locker


def pg_dump(
    cluster: PrivateCluster, role: str, password: str, out: Path
) -> subprocess.CompletedProcess[str]:
    """docs/operations.md's backup command, over TCP as `role`."""
    command = [PG_BIN / "pg_dump", "-Fc", "-h", "127.0.0.1", "-p", cluster.port, "-U", role]
    return subprocess.run(
        [*map(str, command), "-f", str(out), DB],
        env={**os.environ, "PGPASSWORD": password},
        capture_output=True,
        text=True,
        check=False,
    )


def restore(
    cluster: PrivateCluster, dump: Path, database: str = DB
) -> subprocess.CompletedProcess[str]:
    """scripts/restore.sh as the cluster's superuser (through its socket)."""
    env = {
        **os.environ,
        "PGHOST": str(cluster.home),
        "PGPORT": str(cluster.port),
        "PGUSER": "postgres",
        "PG_BIN": str(PG_BIN),
    }
    script = ROOT / "scripts" / "restore.sh"
    return subprocess.run(
        [str(script), str(dump), database], env=env, capture_output=True, text=True, check=False
    )


def start_manage(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """`manage.py …` in the background: Django's start-up takes seconds, so they overlap."""
    return subprocess.Popen(
        [str(BIN / "python"), "manage.py", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(command: subprocess.Popen[str]) -> str:
    """Wait for a start_manage command; the last line it printed (a new key's raw value)."""
    out, err = command.communicate(timeout=180)
    assert command.returncode == 0, err
    return (out.strip().splitlines() or [""])[-1]


def mint(env: dict[str, str], project: str) -> subprocess.Popen[str]:
    org, name = PROJECTS[project]
    return start_manage(env, "create_api_key", "--org", org, "--project", name, "--name", "r")


def migrate(cluster: PrivateCluster, env: dict[str, str]) -> subprocess.Popen[str]:
    """`manage.py migrate` as the owner, as `make migrate` runs it."""
    return start_manage({**env, "DATABASE_URL": cluster.url(OWNER)}, "migrate", "--no-input")


def dump_as_owner(source: PrivateCluster, dump: Path) -> list[subprocess.CompletedProcess[str]]:
    """What the owner's pg_dump meets: AGE's catalog, then (allowed to read it for the
    attempt) the row-level security its tables force on it."""
    attempts = [pg_dump(source, OWNER, source.owner_password, dump.with_suffix(".owner"))]
    source.sql("GRANT SELECT ON ag_catalog.ag_graph, ag_catalog.ag_label TO engram_owner")
    attempts.append(pg_dump(source, OWNER, source.owner_password, dump.with_suffix(".owner2")))
    source.sql("REVOKE SELECT ON ag_catalog.ag_graph, ag_catalog.ag_label FROM engram_owner")
    return attempts


def started_cluster(stack: contextlib.ExitStack) -> PrivateCluster:
    """A private cluster set up as scripts/pg.sh sets one up, running until `stack` closes
    (its logs shown if the set-up fails)."""
    cluster = PrivateCluster()
    stack.callback(cluster.remove)
    stack.push(show_logs(cluster.home))
    cluster.initdb()
    cluster.start()
    cluster.bootstrap()
    return cluster


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    secret_key = secrets.token_hex(32)
    dump = tmp_path_factory.mktemp("backup") / "engram.dump"
    with contextlib.ExitStack() as stack:
        # The source: migrated as the owner, two projects with a key each, served, extracted.
        source = started_cluster(stack)
        env = engram_env(source, secret_key)
        server = Server(env, source.home)  # it loads its model while the migrations run
        stack.callback(server.stop)
        finish(migrate(source, env))
        minting = {project: mint(env, project) for project in ("a", "b")}
        worker = Worker(env, source.home)
        stack.callback(worker.stop)
        keys = {project: finish(command) for project, command in minting.items()}
        server.wait_ready(keys["a"])
        bees, locker = seed(server, keys)
        worker.stop()
        server.stop()
        projects = {project: project_id(source, project) for project in ("a", "b")}
        source_state = state(source)

        # The backup, as docs/operations.md says: the backup role made once, then pg_dump -Fc as it.
        owner_dumps = dump_as_owner(source, dump)
        password = secrets.token_hex(16)
        role = BACKUP_ROLE.format(sql.Identifier(BACKUP), sql.Literal(password))
        source.sql(role.as_string(), dbname="postgres")
        dumped = pg_dump(source, BACKUP, password, dump)
        assert dumped.returncode == 0, dumped.stderr
        source.remove()

        # The restore: a fresh cluster set up as scripts/pg.sh sets one up (roles, an empty
        # database with the extensions), that empty database dropped, scripts/restore.sh,
        # then migrate as the owner, with the worker starting and a key minted for a project
        # new since the restore meanwhile.
        target = started_cluster(stack)
        target.sql(f"DROP DATABASE {DB}", dbname="postgres")
        env = engram_env(target, secret_key)
        server = Server(env, target.home)
        stack.callback(server.stop)
        restored = restore(target, dump)
        assert restored.returncode == 0, restored.stdout + restored.stderr
        restored_state = state(target)
        migrating = migrate(target, env)
        minting = {"new": mint(env, "new")}
        worker = Worker(env, target.home)
        stack.callback(worker.stop)
        finish(migrating)
        keys["new"] = finish(minting["new"])
        server.wait_ready(keys["a"])
        yield Rehearsal(
            source_state=source_state,
            restored_state=restored_state,
            owner_dumps=owner_dumps,
            dump=dump,
            restored=restored,
            target=target,
            server=server,
            keys=keys,
            projects=projects,
            bees=bees,
            locker=locker,
        )


# --- The tests --------------------------------------------------------------------------------


def test_the_owner_role_cannot_dump(rehearsal: Rehearsal) -> None:
    """Why docs/operations.md's backup runs as a role of its own: AGE's catalog belongs to the
    superuser, and even allowed to read it the owner is subject to its tables' forced row-level
    security (which is what walls its SECURITY DEFINER functions in)."""
    closed, forced = rehearsal.owner_dumps
    assert closed.returncode != 0
    assert "permission denied for table ag_graph" in closed.stderr
    assert forced.returncode != 0
    assert "query would be affected by row-level security policy" in forced.stderr


def test_it_restores_every_row_policy_owner_and_grant(rehearsal: Rehearsal) -> None:
    source, restored = rehearsal.source_state, rehearsal.restored_state
    # The rows of every table: the graphs' label tables, history, the queue, the access log.
    assert restored["rows"] == source["rows"]
    for project in rehearsal.projects.values():
        for label in ("Entity", "RELATES"):
            assert restored["rows"][f"{graph(project)}.{label}"][0] > 0
    assert restored["rows"]["public.memory_memoryhistory"][0] > 0
    # Policies, owners (a SECURITY DEFINER function runs as its owner), grants, triggers,
    # sequences (the graphs' id sequences among them), AGE's graphs and labels.
    for part in _SECURITY:
        assert restored[part] == source[part], part
    erase = next(row for row in restored["functions"] if row[0].startswith("engram_erase_user"))
    assert erase[1:3] == (OWNER, True)
    memories = next(row for row in restored["relations"] if row[:2] == ("public", "memory_memory"))
    assert memories[3:6] == (OWNER, True, True)


def test_age_names_each_graph_by_its_schema_after_the_restore(rehearsal: Rehearsal) -> None:
    """The dump carries each graph's id as the source's schema oid; the restore re-points it
    (AGE 1.5 reads through a stale id, but a new graph whose schema gets that oid cannot be
    created, and later AGE versions refuse the graph)."""
    target = rehearsal.target
    graphs = target.sql("SELECT name::text, graphid = namespace::oid FROM ag_catalog.ag_graph")
    assert sorted(graphs) == sorted((graph(p), True) for p in rehearsal.projects.values())
    orphans = target.sql(
        "SELECT count(*) FROM ag_catalog.ag_label l LEFT JOIN ag_catalog.ag_graph g "
        "ON g.graphid = l.graph WHERE g.graphid IS NULL"
    )
    assert orphans == [(0,)]
    assert "graphs repointed\n2 " in rehearsal.restored.stdout


def test_restore_changes_nothing_it_cannot_finish(rehearsal: Rehearsal) -> None:
    """Onto a database that exists, the script stops before changing anything; a damaged
    archive fails the one transaction, and the database the script made for it is dropped."""
    target = rehearsal.target
    again = restore(target, rehearsal.dump)
    assert again.returncode != 0
    assert f"database {DB} exists" in again.stderr
    count, _ = rehearsal.restored_state["rows"]["public.memory_memory"]
    assert target.sql("SELECT count(*) FROM memory_memory") == [(count,)]
    # Its table of contents (at the start) intact, its last table's data zeroed near the end.
    archive = bytearray(rehearsal.dump.read_bytes())
    archive[-600:-100] = bytes(500)
    damaged = rehearsal.dump.with_name("damaged.dump")
    damaged.write_bytes(archive)
    failed = restore(target, damaged, "engram_damaged")
    assert failed.returncode != 0
    assert "dropping database engram_damaged again" in failed.stderr
    exists = "SELECT count(*) FROM pg_database WHERE datname = 'engram_damaged'"
    assert target.sql(exists, dbname="postgres") == [(0,)]


def test_it_searches_and_shows_history_on_the_restored_database(rehearsal: Rehearsal) -> None:
    with rehearsal.api("a") as api:
        assert "I live in Lyon." in search(api, "where does she live", "alice")
        found = ok(api.post("/v1/memories/search/", json=body_of("bees", "alice")))
        assert found[0]["memory"] == "Alice keeps bees in the garden"
        history = ok(api.get(f"/v1/memories/{rehearsal.bees}/history/"))
    assert [(h["event"], h["new_memory"]) for h in history] == [
        ("ADD", "Alice keeps bees on the roof"),
        ("UPDATE", "Alice keeps bees in the garden"),
    ]


def test_it_traverses_the_graph_on_the_restored_database(rehearsal: Rehearsal) -> None:
    with rehearsal.api("a") as api:
        alice = traverse(api, "alice", "alice")
        bob = ok(api.get("/v1/graph/?user_id=bob"))
        body = {**body_of("who works at Globex", "bob"), "enable_graph": True}
        found = ok(api.post("/v1/memories/search/", json=body))
    assert triples(alice["relations"]) == {
        ("alice", "lives_in", "lyon"),
        ("alice", "works_at", "acme"),
    }
    assert triples(bob["results"]) == {("bob", "works_at", "globex")}
    assert ("bob", "works_at", "globex") in triples(found["relations"])


def test_a_tenant_reads_nothing_of_another_on_the_restored_database(
    rehearsal: Rehearsal,
) -> None:
    with rehearsal.api("b") as api:
        found = search(api, "Lyon Acme bees", "alice")
        assert found and found <= B_TEXTS
        assert triples(traverse(api, "alice", "alice")["relations"]) == {
            ("alice", "lives_in", "oslo")
        }
        ok(api.get(f"/v1/memories/{rehearsal.bees}/"), 404)
        assert ok(api.get("/v1/memories/?user_id=bob")) == []
    with rehearsal.api("a") as api:
        ok(api.get(f"/v1/memories/{rehearsal.locker}/"), 404)
        assert search(api, "locker code", "alice").isdisjoint(B_TEXTS)
    # Underneath, as the application role: the policies came back with their tables.
    a, b = rehearsal.projects["a"], rehearsal.projects["b"]
    count = sql.SQL("SELECT count(*) FROM {}")
    with psycopg.connect(rehearsal.target.url(APP)) as conn:
        # No tenant: nothing.
        for table in ("memory_memory", "memory_memoryhistory"):
            assert conn.execute(count.format(sql.Identifier(table))).fetchone() == (0,)
        assert conn.execute(count.format(label_table(a, "RELATES"))).fetchone() == (0,)
        # Tenant a: its rows, none of b's.
        conn.execute("SELECT set_config('engram.project_id', %s, true)", [str(a)])
        assert conn.execute(count.format(label_table(b, "Entity"))).fetchone() == (0,)
        mine = conn.execute(count.format(label_table(a, "Entity"))).fetchone()
        assert mine is not None and mine[0] > 0
        projects = conn.execute("SELECT DISTINCT project_id FROM memory_memory").fetchall()
        assert projects == [(a,)]


def test_the_restored_database_takes_new_memories_and_relations(rehearsal: Rehearsal) -> None:
    """The graphs' id sequences and AGE's labels work for writes: a new employer is a new edge
    with an id past the restored ones, and ends the old relation (the offline extractor's
    contradiction). A project new since the restore gets its graph (engram_ensure_graph)."""
    edges = sql.SQL("SELECT max(id::text::bigint) FROM {}")
    relates = edges.format(label_table(rehearsal.projects["a"], "RELATES")).as_string()
    [(restored_max,)] = rehearsal.target.sql(relates)
    with rehearsal.api("a") as api:
        add_and_wait(api, "bob", "I work at Initech now.")
        bob = ok(api.get("/v1/graph/?user_id=bob&include_invalid=true"))["results"]
    assert {(r["destination"], r["valid"]) for r in bob} == {
        ("globex", False),
        ("initech", True),
    }
    initech = next(r for r in bob if r["destination"] == "initech")
    assert int(initech["id"]) > restored_max
    with rehearsal.api("new") as api:
        add_and_wait(api, "carol", "I live in Porto.")
        carol = traverse(api, "carol", "carol")
    assert triples(carol["relations"]) == {("carol", "lives_in", "porto")}
    graphs = rehearsal.target.sql(
        "SELECT count(*), count(*) FILTER (WHERE graphid = namespace::oid) FROM ag_catalog.ag_graph"
    )
    assert graphs == [(3, 3)]


def test_it_erases_a_user_through_the_api_on_the_restored_database(rehearsal: Rehearsal) -> None:
    """DELETE /v1/entities/user/alice/ in project a: the worker runs engram_erase_user (the
    owner's SECURITY DEFINER function) on the restored database; project b's alice stays."""
    with rehearsal.api("a") as api:
        erasure = ok(api.delete("/v1/entities/user/alice/"), 202)
        done = wait_for(lambda: ok(api.get(f"/v1/erasures/{erasure['event_id']}/")), ended)
        assert done["status"] == "SUCCEEDED", done
        assert (done["counts"]["memories"], done["counts"]["graph_relations"]) == (3, 2)
        assert search(api, "Lyon", "alice") == set()
        assert traverse(api, "alice", "alice") == {"nodes": [], "relations": []}
        bob = ok(api.get("/v1/graph/?user_id=bob"))
    assert triples(bob["results"]) == {("bob", "works_at", "initech")}
    # In the graph's table itself: bob's vertices are left, none of alice's.
    vertices = sql.SQL("SELECT ag_catalog.agtype_out(properties)::text FROM {}")
    entity = vertices.format(label_table(rehearsal.projects["a"], "Entity")).as_string()
    remaining = [row[0] for row in rehearsal.target.sql(entity)]
    assert remaining
    assert not any('"user_id": "alice"' in properties for properties in remaining)
    with rehearsal.api("b") as api:
        assert "I live in Oslo." in search(api, "Oslo", "alice")
