"""1M memories: a bulk loader and the search figures at that size (issue #13, "Scale benchmark").

Works in a database of its own in the local cluster (default `engram_scale`, port 5433), never
in `engram`. One command reproduces everything:

    .venv/bin/python bench/scale.py --setup            # create + migrate, load 1M, measure
    .venv/bin/python bench/scale.py --reuse            # measure the existing load again
    .venv/bin/python bench/scale.py --setup --memories 50000 --users 500   # a quick check

--setup  creates the database as the cluster superuser (owner engram_owner, extensions vector,
         age, pg_trgm, btree_gin, USAGE on ag_catalog, as scripts/pg.sh does for `engram`) and
         runs the migrations into it as the owner; every step is idempotent.
load     (unless --reuse) empties the scale projects' memories and loads --memories memories for
         --users users spread over --projects projects (Zipf sizes per project, exponent
         --skew: a few users with 10k-50k memories, most with tens). Texts are 1-2 clauses of
         bench/common.sentence's vocabulary; each row's vector is the real MiniLM embedding of
         one of --pool pooled texts plus Gaussian noise (--noise), normalised, so the HNSW graph
         has the clustered structure of real data; the rows the queries target (--targets per
         measured user) get the real embedding of their own text. The memory table's secondary
         indexes are dropped (their `pg_indexes.indexdef` saved first) and re-created from that
         saved definition after a binary COPY (as the superuser: COPY FROM is refused under row
         security), with a large maintenance_work_mem and parallel maintenance workers. Every
         column the app reads is filled (hash, tsvector (generated), scope ids, state, calendar
         attributes, categories, metadata, seq), and the entity links (memory_memoryentity)
         the local recogniser finds, as bench/search.py does.
measure  for three user classes of project 0 (small: 10th percentile size, median, largest):
         short queries and LoCoMo-length questions, each with no filter and with an agent,
         category, date-range and metadata filter:
         - database time of the search statement, in-process, as the API runs it (exact ranking
           for a scoped search, memory/api/search.py), and with the HNSW index (exact=False);
         - top-20 recall of the HNSW path against the exact scan;
         - HTTP time (incl. the query embedding) through a gunicorn started on the scale
           database (--port, config/gunicorn_conf.py), stopped afterwards;
         then EXPLAIN (ANALYZE, BUFFERS) of the hot query for the largest user and the Postgres
         settings that matter.
summary  memories loaded and searches per second of each pass, and the peak RSS of this
         process, the gunicorn, postgres and any Dramatiq worker (common.RunSummary).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")

from common import ROOT, WORDS, Api, RunSummary, percentiles, user_sizes

LOCAL = ROOT / ".local"
PY = str(ROOT / ".venv" / "bin" / "python")
EXTENSIONS = ("vector", "age", "pg_trgm", "btree_gin")
OWNER_ROLE, APP_ROLE = "engram_owner", "engram_app"
ORG = "scale"
AGENTS = ("agent-0", "agent-1", "agent-2")
SOURCES = ("chat", "email", "import")
CATEGORY = {  # a noun's category (stored lower-case, as the app stores them)
    "coffee": "food", "recipe": "food", "garden": "home", "puppy": "home", "novel": "hobbies",
    "guitar": "hobbies", "concert": "entertainment", "museum": "travel", "bicycle": "sports",
    "marathon": "sports",
}  # fmt: skip
FILTERS = ("none", "agent", "category", "date", "metadata")
CLASSES = ("small", "median", "largest")
KINDS = ("short", "question")
DAYS = 730  # created_at spread over the last two years


# --- connection settings ------------------------------------------------------------------


def env_file() -> dict[str, str]:
    values = {}
    for line in (LOCAL / "engram.env").read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not name.lstrip().startswith("#"):
            values[name.strip()] = value.strip().strip("'\"")
    return values


def with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def superuser_dsn(db: str) -> str:
    """The cluster superuser over the private unix socket (local trust), as scripts/pg.sh."""
    pg_home = (LOCAL / "pgdir").read_text().strip()
    digest = hashlib.sha256(pg_home.encode()).hexdigest()[:12]
    sock = f"/tmp/engram-pg-{digest}"  # noqa: S108 - scripts/pg.sh's socket directory
    port = urlsplit(env_file()["DATABASE_URL"]).port or 5433
    return f"host={sock} port={port} user=postgres dbname={db}"


def superuser(db: str) -> Any:
    import psycopg

    return psycopg.connect(superuser_dsn(db), autocommit=True)


# --- set-up ---------------------------------------------------------------------------------


def setup(db: str, owner_url: str, app_url: str) -> None:
    from psycopg import sql

    started = time.perf_counter()
    with superuser("postgres") as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db]).fetchone():
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(db), sql.Identifier(OWNER_ROLE)
                )
            )
    with superuser(db) as conn:
        for ext in EXTENSIONS:
            conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(ext)))
        conn.execute(
            sql.SQL("GRANT USAGE ON SCHEMA ag_catalog TO {}, {}").format(
                sql.Identifier(OWNER_ROLE), sql.Identifier(APP_ROLE)
            )
        )
    env = {**os.environ, "DATABASE_URL": owner_url, "DATABASE_OWNER_URL": owner_url}
    subprocess.run(  # noqa: S603 - our own command
        [PY, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    print(f"setup: database {db} ready and migrated in {time.perf_counter() - started:.0f}s")


# --- data -----------------------------------------------------------------------------------


def clause(rng: random.Random) -> dict[str, str]:
    return {k: rng.choice(v) for k, v in WORDS.items()}


def clause_text(w: dict[str, str], first: bool) -> str:
    who = "User" if first else "then"
    return f"{who} {w['verb']} the {w['adj']} {w['noun']} in {w['place']}"


def make_pool(size: int, rng: random.Random) -> list[list[dict[str, str]]]:
    """Pooled texts of one or two clauses (45-100 characters, as LoCoMo's facts)."""
    return [[clause(rng) for _ in range(rng.choice((1, 1, 2)))] for _ in range(size)]


def pool_text(entry: list[dict[str, str]]) -> str:
    return ", ".join(clause_text(w, i == 0) for i, w in enumerate(entry))


def short_query(w: dict[str, str]) -> str:
    return f"{w['adj']} {w['noun']} in {w['place']}"


def question(w: dict[str, str]) -> str:
    """A LoCoMo-length question (80-120 characters)."""
    return (
        f"Do you remember when the user {w['verb']} the {w['adj']} {w['noun']} in "
        f"{w['place']}, and what did they think of it afterwards?"
    )


class Plan:
    """Who gets how many memories, and which users are measured (project 0)."""

    def __init__(self, memories: int, users: int, projects: int, skew: float) -> None:
        per_project_users = max(1, users // projects)
        self.sizes = [
            user_sizes(memories // projects, per_project_users, skew) for _ in range(projects)
        ]
        sizes = self.sizes[0]
        order = sorted(range(len(sizes)), key=lambda i: sizes[i])
        self.measured = {
            "small": order[len(order) // 10],
            "median": order[len(order) // 2],
            "largest": order[-1],
        }


COLUMNS = (
    "id, project_id, user_id, agent_id, text, hash, embedding, context_before, context_after, "
    "metadata, categories, role, actor_id, created_at, updated_at, structured_attributes, state, "
    "immutable, source_positions"
)
TYPES = [
    "uuid", "uuid", "text", "text", "text", "varchar", "vector", "text", "text", "jsonb",
    "varchar[]", "varchar", "varchar", "timestamptz", "timestamptz", "jsonb", "varchar", "bool",
    "int4[]",
]  # fmt: skip


def drop_indexes(conn: Any, db: str) -> list[tuple[str, str]]:
    """Drop the memory table's secondary indexes (all but those backing constraints), keeping
    their definitions (pg_indexes.indexdef, i.e. what the migrations made) in .local for
    build_indexes; a run interrupted before the rebuild finds them there."""
    saved = LOCAL / f"{db}_indexes.json"
    if not saved.exists():
        rows = conn.execute(
            """SELECT i.indexname, i.indexdef FROM pg_indexes i
               WHERE i.schemaname = 'public' AND i.tablename = 'memory_memory'
                 AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                                 WHERE c.conindid = (quote_ident(i.indexname))::regclass)
               ORDER BY i.indexname"""
        ).fetchall()
        saved.write_text(json.dumps([list(row) for row in rows]))
    indexes = [(name, definition) for name, definition in json.loads(saved.read_text())]
    for name, _ in indexes:
        conn.execute(f'DROP INDEX IF EXISTS "{name}"')
    return indexes


def build_indexes(
    conn: Any,
    db: str,
    indexes: list[tuple[str, str]],
    args: argparse.Namespace,
    phases: dict[str, float],
) -> None:
    conn.execute(f"SET maintenance_work_mem = '{args.maintenance_work_mem}'")
    conn.execute(f"SET max_parallel_maintenance_workers = {int(args.parallel_workers)}")
    for name, definition in indexes:
        t = time.perf_counter()
        conn.execute(definition)
        phases[f"index {name}"] = time.perf_counter() - t
        print(f"  built {name} in {phases[f'index {name}']:.0f}s", flush=True)
    (LOCAL / f"{db}_indexes.json").unlink(missing_ok=True)


class Pool:
    """The pooled texts, their real embeddings and the entity names the recogniser finds."""

    def __init__(self, size: int, rng: random.Random) -> None:
        import numpy as np

        from memory.text.embeddings import embed
        from memory.text.recognise import normalise, recognise

        self.entries = make_pool(size, rng)
        self.texts = [pool_text(e) for e in self.entries]
        self.vectors = np.vstack(
            [embed(self.texts[i : i + 256]) for i in range(0, len(self.texts), 256)]
        )
        self.names = [sorted({normalise(n) for n, _ in recognise(t)}) for t in self.texts]


class Copier:
    """Writes one user's rows into a COPY, collecting entity links and the measured targets."""

    def __init__(self, args: argparse.Namespace, pool: Pool, plan: Plan) -> None:
        import numpy as np

        self.args, self.pool = args, pool
        self.rng = random.Random(args.seed)
        self.np_rng = np.random.default_rng(args.seed)
        self.now = datetime.now(UTC)
        self.measured = {user: c for c, user in plan.measured.items()}
        self.targets: dict[str, list[dict[str, Any]]] = {c: [] for c in CLASSES}
        self.links: list[tuple[Any, ...]] = []
        self.real_rows = 0

    def vectors(self, picks: Any, texts: list[str], real: int) -> Any:
        import numpy as np

        from memory.text.embeddings import embed

        noise = self.np_rng.normal(scale=self.args.noise / 384**0.5, size=(len(picks), 384))
        vectors = self.pool.vectors[picks] + noise.astype("float32")
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        if real:  # the rows the queries aim at: the real embedding of their own text
            batches = [texts[j : min(j + 256, real)] for j in range(0, real, 256)]
            vectors[:real] = np.vstack([embed(batch) for batch in batches])
            self.real_rows += real
        return vectors

    def user(self, cp: Any, project_pk: Any, p: int, u: int, size: int) -> None:
        from psycopg.types.json import Jsonb

        from memory.models import content_hash, structured_attributes

        rng, user_id = self.rng, f"user-{u}"
        picks = self.np_rng.integers(0, len(self.pool.texts), size)
        texts = [f"{self.pool.texts[k]} #{rng.randrange(10**6)}" for k in picks]
        cls = self.measured.get(u) if p == 0 else None
        real = min(size, self.args.targets) if cls else 0
        vectors = self.vectors(picks, texts, real)
        for i in range(size):
            k = int(picks[i])
            first = self.pool.entries[k][0]
            agent = AGENTS[rng.randrange(3)] if rng.random() < 0.3 else None
            moment = self.now - timedelta(seconds=rng.randrange(DAYS * 86400))
            source = SOURCES[rng.randrange(3)]
            memory_id = uuid.uuid4()
            cp.write_row(
                (
                    memory_id, project_pk, user_id, agent, texts[i], content_hash(texts[i]),
                    vectors[i], "", "", Jsonb({"source": source, "lang": "en"}),
                    [CATEGORY[first["noun"]]], "user", "", moment, moment,
                    Jsonb(structured_attributes(moment)), "active", False, [],
                )
            )  # fmt: skip
            self.links.extend(
                (project_pk, memory_id, name, user_id, agent, moment) for name in self.pool.names[k]
            )
            if cls and i < real:
                self.targets[cls].append(
                    {
                        "user_id": user_id, "agent_id": agent, "words": first,
                        "category": CATEGORY[first["noun"]], "source": source,
                        "created_at": moment,
                    }
                )  # fmt: skip


def load(
    args: argparse.Namespace, projects: list[Any], plan: Plan, summary: RunSummary
) -> dict[str, Any]:
    from pgvector.psycopg import register_vector

    phases: dict[str, float] = {}
    started = time.perf_counter()
    pool = Pool(args.pool, random.Random(args.seed))
    phases["embed pool"] = time.perf_counter() - started

    conn = superuser(args.db)
    register_vector(conn)
    t = time.perf_counter()
    conn.execute("TRUNCATE memory_memory CASCADE")  # this database is the benchmark's own
    indexes = drop_indexes(conn, args.db)
    phases["truncate + drop indexes"] = time.perf_counter() - t

    copier = Copier(args, pool, plan)
    t = time.perf_counter()
    total = 0
    for p, project in enumerate(projects):
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY memory_memory ({COLUMNS}) FROM STDIN BINARY") as cp,
        ):
            cp.set_types(TYPES)
            for u, size in enumerate(plan.sizes[p]):
                copier.user(cp, project.pk, p, u, size)
                total += size
                if u % 200 == 0:
                    rate = total / (time.perf_counter() - t)
                    print(f"  copied {total}/{args.memories} ({rate:.0f}/s)", end="\r", flush=True)
    phases["COPY memories"] = time.perf_counter() - t
    print()
    t = time.perf_counter()
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY memory_memoryentity (project_id, memory_id, entity_name, user_id, agent_id, "
            "created_at) FROM STDIN BINARY"
        ) as cp,
    ):
        cp.set_types(["uuid", "uuid", "text", "varchar", "varchar", "timestamptz"])
        for row in copier.links:
            cp.write_row(row)
    phases[f"COPY entity links ({len(copier.links)})"] = time.perf_counter() - t
    build_indexes(conn, args.db, indexes, args, phases)
    t = time.perf_counter()
    conn.execute("VACUUM (ANALYZE) memory_memory")
    conn.execute("VACUUM (ANALYZE) memory_memoryentity")
    phases["vacuum analyze"] = time.perf_counter() - t
    phases["total"] = time.perf_counter() - started
    summary.add("COPY memories", total, phases["COPY memories"], "memories")
    summary.add(
        "load, every phase (pool, COPY, indexes, vacuum)", total, phases["total"], "memories"
    )
    conn.close()
    print(
        f"load: {total} memories ({copier.real_rows} with their own real embedding, the rest "
        f"pooled from {len(pool.texts)} real ones + noise {args.noise}), "
        f"{len(copier.links)} entity links"
    )
    for phase, seconds in phases.items():
        print(f"  {phase:<44} {seconds:8.1f}s")
    (LOCAL / f"{args.db}_targets.json").write_text(json.dumps(copier.targets, default=str))
    return copier.targets


def sizes_report(db: str) -> None:
    with superuser(db) as conn:
        rows = conn.execute(
            """SELECT c.relname, pg_relation_size(c.oid), pg_indexes_size(c.oid),
                      pg_total_relation_size(c.oid)
               FROM pg_class c WHERE c.relname IN ('memory_memory', 'memory_memoryentity')"""
        ).fetchall()
        for name, heap, indexes, total in rows:
            toast = total - heap - indexes
            print(f"size {name}: table {heap / 2**20:.0f} MB, TOAST {toast / 2**20:.0f} MB "
                  f"(the vectors), indexes {indexes / 2**20:.0f} MB, total {total / 2**20:.0f} MB")  # fmt: skip
        for table, index, size in conn.execute(
            """SELECT tablename, indexname, pg_relation_size(quote_ident(indexname)::regclass)
               FROM pg_indexes WHERE tablename IN ('memory_memory', 'memory_memoryentity')
               ORDER BY 3 DESC"""
        ).fetchall():
            print(f"  index {table}.{index}: {size / 2**20:.1f} MB")
        print(
            f"database {db}: {conn.execute('SELECT pg_database_size(%s)', [db]).fetchone()[0] / 2**30:.2f} GB"
        )


# --- measurement ----------------------------------------------------------------------------


def query_set(
    targets: dict[str, list[dict[str, Any]]], queries: int, rng: random.Random
) -> list[dict[str, Any]]:
    """(class, kind, filter, body) cells: each query aims at one target memory, and its filter
    is one that target satisfies (so the answer is not empty)."""
    cells = []
    for cls in CLASSES:
        pool = targets[cls]
        for kind in KINDS:
            for flt in FILTERS:
                for _ in range(queries):
                    target = rng.choice(pool)
                    if flt == "agent":  # an agent's share of the user's memories
                        candidates = [x for x in pool if x["agent_id"]] or pool
                        target = rng.choice(candidates)
                    words = target["words"]
                    text = short_query(words) if kind == "short" else question(words)
                    filters: dict[str, Any] = {"user_id": target["user_id"]}
                    if flt == "agent" and target["agent_id"]:
                        filters["agent_id"] = target["agent_id"]
                    elif flt == "category":
                        filters["categories"] = {"in": [target["category"]]}
                    elif flt == "date":
                        created = datetime.fromisoformat(str(target["created_at"]))
                        filters["created_at"] = {
                            "gte": (created - timedelta(days=45)).isoformat(),
                            "lte": (created + timedelta(days=45)).isoformat(),
                        }
                    elif flt == "metadata":
                        filters["metadata"] = {"source": target["source"]}
                    cells.append(
                        {"class": cls, "kind": kind, "filter": flt, "query": text,
                         "filters": filters}
                    )  # fmt: skip
    return cells


def run_search(
    project_id: Any, cell: dict[str, Any], vector: list[float], exact: bool | None
) -> list[Any]:
    """The search as memory/api/search.py runs it; exact=None keeps the API's own choice."""
    from memory import queries
    from memory.retrieval.filters import compile_filters
    from memory.retrieval.search import hybrid_search
    from memory.text.query import analyse

    where = compile_filters(cell["filters"])
    return hybrid_search(
        queries.matching(project_id, where), analyse(cell["query"], embedding=vector),
        top_k=20, threshold=0.1, exact=exact,
    )  # fmt: skip


def measure_db(
    project_id: Any, cells: list[dict[str, Any]], vectors: list[list[float]], exact: bool | None
) -> tuple[list[float], list[list[Any]]]:
    from django.db import connection

    from memory.retrieval.search import STATEMENT_STARTS
    from tenants.db import project_context

    timings: list[float] = []
    results: list[list[Any]] = []

    def timer(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if sql.startswith(STATEMENT_STARTS):
                timings.append((time.perf_counter() - started) * 1000)

    with connection.execute_wrapper(timer):
        for cell, vector in zip(cells, vectors, strict=True):
            with project_context(project_id):
                hits = run_search(project_id, cell, vector, exact)
            results.append([h.memory.id for h in hits])
    return timings, results


def group(cells: list[dict[str, Any]], values: list[Any]) -> dict[tuple[str, str, str], list[Any]]:
    out: dict[tuple[str, str, str], list[Any]] = {}
    for cell, value in zip(cells, values, strict=True):
        out.setdefault((cell["class"], cell["kind"], cell["filter"]), []).append(value)
    return out


def explain(project_id: Any, cell: dict[str, Any], vector: list[float], exact: bool) -> str:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory.retrieval.search import STATEMENT_STARTS
    from tenants.db import project_context

    with project_context(project_id):
        with CaptureQueriesContext(connection) as captured:
            run_search(project_id, cell, vector, exact)
        hot = [
            q["sql"] for q in captured.captured_queries if q["sql"].startswith(STATEMENT_STARTS)
        ][-1]
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + hot)
            plan = "\n".join(row[0] for row in cursor.fetchall())
    return re.sub(r"'\[[-0-9.,e]+\]'::vector", "'[<384 floats>]'::vector", plan)


def settings_report() -> None:
    from django.db import connection

    names = (
        "shared_buffers", "work_mem", "effective_cache_size", "maintenance_work_mem",
        "random_page_cost", "max_parallel_workers_per_gather", "jit", "hnsw.ef_search",
        "hnsw.iterative_scan", "hnsw.max_scan_tuples",
    )  # fmt: skip
    with connection.cursor() as cursor:
        values = []
        for name in names:
            cursor.execute("SELECT current_setting(%s, true)", [name])
            values.append(f"{name}={cursor.fetchone()[0]}")
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        values.append(f"pgvector={cursor.fetchone()[0]}")
        cursor.execute("SHOW server_version")
        values.append(f"postgres={cursor.fetchone()[0]}")
    print("settings: " + ", ".join(values))


def start_server(args: argparse.Namespace, app_url: str, owner_url: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ, "DATABASE_URL": app_url, "DATABASE_OWNER_URL": owner_url,
        "ENGRAM_WEB_WORKERS": str(args.web_workers),
        # The default 1200 requests/minute per key would answer 429 part-way.
        "ENGRAM_API_RATE": "off",
    }  # fmt: skip
    log = open(LOCAL / f"{args.db}_gunicorn.log", "w")  # noqa: SIM115
    server = subprocess.Popen(  # noqa: S603 - our own command
        [str(ROOT / ".venv/bin/gunicorn"), "-c", "config/gunicorn_conf.py", "--bind",
         f"127.0.0.1:{args.port}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    return server


def table(title: str, grouped: dict[tuple[str, str, str], list[float]]) -> None:
    print(f"\n{title} (ms; p50 / p95 / p99)")
    print(f"  {'class':<8} {'query':<9} " + " ".join(f"{f:>22}" for f in FILTERS))
    for cls in CLASSES:
        for kind in KINDS:
            cells = []
            for flt in FILTERS:
                s = percentiles(grouped.get((cls, kind, flt), []))
                cells.append(f"{s['p50']:6.1f} /{s['p95']:6.1f} /{s['p99']:6.1f}")
            print(f"  {cls:<8} {kind:<9} " + " ".join(f"{c:>22}" for c in cells))


def measure(
    args: argparse.Namespace,
    projects: list[Any],
    plan_sizes: list[list[int]],
    targets: dict[str, list[dict[str, Any]]],
    app_url: str,
    owner_url: str,
    summary: RunSummary,
) -> None:
    from memory.text.embeddings import embed

    project_id = projects[0].pk
    sizes = plan_sizes[0]
    print(
        "\nmeasured users (project 0): "
        + ", ".join(
            f"{c} {targets[c][0]['user_id']} ({sizes[int(targets[c][0]['user_id'][5:])]} memories)"
            for c in CLASSES
        )
    )
    cells = query_set(targets, args.queries, random.Random(args.seed + 1))
    started = time.perf_counter()
    vectors = [[float(x) for x in row] for row in embed([c["query"] for c in cells])]
    print(f"embedded {len(cells)} queries in {time.perf_counter() - started:.0f}s")
    settings_report()
    if not args.skip_db:
        measure_database(project_id, cells, vectors, summary)
    if not args.skip_http:
        measure_http(args, projects[0], cells, app_url, owner_url, summary)


def timed_db(
    project_id: Any,
    cells: list[dict[str, Any]],
    vectors: list[list[float]],
    exact: bool | None,
    summary: RunSummary,
) -> tuple[list[float], list[list[Any]]]:
    """measure_db, its wall time a phase of the run summary."""
    path = {None: "as the API runs it", False: "HNSW path", True: "exact scan"}[exact]
    with summary.phase(f"search in process, {path}", "searches") as rate:
        timings, results = measure_db(project_id, cells, vectors, exact)
        rate.count = len(results)
    return timings, results


def measure_database(
    project_id: Any, cells: list[dict[str, Any]], vectors: list[list[float]], summary: RunSummary
) -> None:
    measure_db(project_id, cells[:50], vectors[:50], None)  # warm the cache
    db_api, _ = timed_db(project_id, cells, vectors, None, summary)
    table(
        "DATABASE time, search statement as the API runs it (exact rank in scope)",
        group(cells, db_api),
    )
    db_hnsw, hnsw_ids = timed_db(project_id, cells, vectors, False, summary)
    table("DATABASE time, HNSW index path (exact=False, iterative scan)", group(cells, db_hnsw))
    _, truth = timed_db(project_id, cells, vectors, True, summary)
    recall = [
        len(set(a) & set(b)) / len(b) if b else 1.0 for a, b in zip(hnsw_ids, truth, strict=True)
    ]
    print("\ntop-20 recall of the HNSW path against the exact scan (mean / min)")
    for key, values in group(cells, recall).items():
        if key[2] == "none" or key[0] == "largest":
            print(
                f"  {key[0]:<8} {key[1]:<9} {key[2]:<9} {sum(values) / len(values):.3f} / {min(values):.3f}"
            )
    largest = next(c for c in cells if c["class"] == "largest" and c["filter"] == "none"
                   and c["kind"] == "question")  # fmt: skip
    vector = vectors[cells.index(largest)]
    for exact in (True, False):
        print(f"\nEXPLAIN (ANALYZE, BUFFERS), largest user, question, no filter, exact={exact}:")
        print(explain(project_id, largest, vector, exact))


def measure_http(
    args: argparse.Namespace,
    project: Any,
    cells: list[dict[str, Any]],
    app_url: str,
    owner_url: str,
    summary: RunSummary,
) -> None:
    from tenants.actions import do_create_api_key

    api_key = do_create_api_key(org_name=ORG, project_name=project.name)
    server = start_server(args, app_url, owner_url)
    try:
        api = Api(f"http://127.0.0.1:{args.port}", api_key.raw)
        for _ in range(120):
            try:
                api.call(
                    "POST",
                    "/v3/memories/search/",
                    json={"query": "warm up", "filters": {"user_id": "user-1"}},
                )
                break
            except Exception:  # not up yet
                time.sleep(1)
        for cell in cells[:50]:
            api.call(
                "POST",
                "/v3/memories/search/",
                json={"query": cell["query"], "filters": cell["filters"], "top_k": 20},
            )
        with summary.phase("search via gunicorn (HTTP)", "searches") as rate:
            http = [
                api.call(
                    "POST",
                    "/v3/memories/search/",
                    json={"query": c["query"], "filters": c["filters"], "top_k": 20},
                )[1]
                for c in cells
            ]
            rate.count = len(http)
        table(
            f"HTTP time via gunicorn ({args.web_workers} workers), incl. query embedding",
            group(cells, http),
        )
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", default="engram_scale", help="the benchmark's own database")
    parser.add_argument(
        "--setup", action="store_true", help="create and migrate --db first (idempotent)"
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="measure the existing load (same --memories/--users/--projects/--skew as it)",
    )
    parser.add_argument("--memories", type=int, default=1_000_000, help="memories to load in all")
    parser.add_argument(
        "--users", type=int, default=10_000, help="users in all (split over the projects)"
    )
    parser.add_argument("--projects", type=int, default=4, help="projects (tenants)")
    parser.add_argument(
        "--skew", type=float, default=1.0, help="Zipf exponent of user sizes per project"
    )
    parser.add_argument(
        "--pool", type=int, default=3_000, help="texts really embedded for the bulk vectors"
    )
    parser.add_argument(
        "--noise", type=float, default=0.3, help="norm of the noise added to a pooled vector"
    )
    parser.add_argument(
        "--targets", type=int, default=2_000, help="real-embedded rows per measured user"
    )
    parser.add_argument(
        "--queries", type=int, default=60, help="queries per (class, query kind, filter) cell"
    )
    parser.add_argument("--maintenance-work-mem", default="4GB", help="for the index builds")
    parser.add_argument(
        "--parallel-workers", type=int, default=2, help="max_parallel_maintenance_workers"
    )
    parser.add_argument(
        "--port", type=int, default=8100, help="port of the gunicorn started for HTTP"
    )
    parser.add_argument("--web-workers", type=int, default=2, help="its worker processes")
    parser.add_argument("--skip-http", action="store_true", help="no HTTP figures")
    parser.add_argument("--skip-db", action="store_true", help="no database figures (HTTP only)")
    parser.add_argument("--seed", type=int, default=42, help="of the data and the queries")
    args = parser.parse_args()

    env = env_file()
    app_url = with_db(env["DATABASE_URL"], args.db)
    owner_url = with_db(env["DATABASE_OWNER_URL"], args.db)
    # Django talks to the scale database only (as the app role, row security on).
    os.environ["DATABASE_URL"] = app_url
    os.environ["DATABASE_OWNER_URL"] = owner_url
    for name in ("ENGRAM_DB_APP_ROLE", "ENGRAM_SECRET_KEY_FILE", "ENGRAM_ENV"):
        if name in env:
            os.environ.setdefault(name, env[name])
    print(f"command: {' '.join(sys.argv)}")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
    summary = RunSummary.start(f"http://127.0.0.1:{args.port}")
    if args.setup:
        setup(args.db, owner_url, app_url)

    import django

    django.setup()
    from tenants.actions import do_create_api_key
    from tenants.models import Project

    names = [f"scale-{p}" for p in range(args.projects)]
    for name in names:
        if not Project.objects.filter(organization__name=ORG, name=name).exists():
            do_create_api_key(org_name=ORG, project_name=name)
    projects = [Project.objects.get(organization__name=ORG, name=name) for name in names]
    plan = Plan(args.memories, args.users, args.projects, args.skew)
    print(
        f"data: {args.memories} memories, {args.users} users, {args.projects} projects; "
        f"largest user {max(max(s) for s in plan.sizes)}, median "
        f"{sorted(plan.sizes[0])[len(plan.sizes[0]) // 2]}, users with >= 10k: "
        f"{sum(1 for s in plan.sizes for n in s if n >= 10_000)}"
    )
    if args.reuse:
        targets = json.loads((LOCAL / f"{args.db}_targets.json").read_text())
    else:
        targets = load(args, projects, plan, summary)
    sizes_report(args.db)
    measure(args, projects, plan.sizes, targets, app_url, owner_url, summary)
    print(f"\nload average {os.getloadavg()[0]:.2f} at end")
    summary.report()


if __name__ == "__main__":
    main()
