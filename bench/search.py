"""Search speed at scale, and add throughput, on the real database.

Generates N memories (default 100,000) across U users (default 1,000) with skewed sizes in a
fresh project: synthetic sentences, real MiniLM embeddings for a sample of them and random unit
vectors for the rest. Then measures, over Q queries (default 1,000):
  - database time of the search statement alone (the query embedding precomputed);
  - full HTTP time through the API (including the query embedding), against a running server;
and the throughput of `add` (infer=false) through the API in batches; each with p50/p95/p99, and
at the end the run summary (common.RunSummary): memories generated and added and searches per
second, and the peak RSS of the client, web server(s), worker and postgres.

Every generated memory is also linked to the entities the local recogniser finds in it (its
place), written straight into MemoryEntity as the worker would (without the AGE vertices, which
search does not read), and each linked name of a user gets its vector (EntityVector), so the
search statement carries its entity signal at full size, matching by meaning included.
--also-host URL (repeatable) measures the HTTP search time through another server on the same
database too, e.g. one running the previous commit (a paired comparison).

    make run   # in another terminal
    .venv/bin/python bench/search.py [--memories 100000 --users 1000 --queries 1000]
        [--also-host URL ...]
    (the environment of .local/engram.env is read, so the benchmark can write the data set)
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")

from common import (
    Api,
    RunSummary,
    default_host,
    fmt_ms,
    load_local_env,
    percentiles,
    sentence,
    user_sizes,
)

load_local_env()


def generate(
    project: Any, memories: int, users: int, sample: int, rng: random.Random, summary: RunSummary
) -> list[int]:
    import numpy as np
    from django.utils import timezone

    from memory.models import Memory, content_hash
    from memory.text.embeddings import embed
    from tenants.db import project_context

    sizes = user_sizes(memories, users)
    np_rng = np.random.default_rng(7)
    real_every = max(1, memories // sample)
    started = time.perf_counter()
    batch: list[Memory] = []
    done = 0
    for user, size in enumerate(sizes):
        for _ in range(size):
            text = sentence(rng)
            batch.append(
                Memory(
                    project=project,
                    user_id=f"user-{user}",
                    text=text,
                    hash=content_hash(text),
                    embedding=None,
                    created_at=timezone.now(),
                    updated_at=timezone.now(),
                )
            )
            if len(batch) == 1000:
                done += _flush(batch, real_every, done, np_rng, embed, project_context, project)
                batch = []
                print(
                    f"  generated {done}/{memories} ({done / (time.perf_counter() - started):.0f}/s)",
                    end="\r",
                    flush=True,
                )
    done += _flush(batch, real_every, done, np_rng, embed, project_context, project)
    # The linked names' vectors, as the worker writes them (search matches query words to them).
    from memory.graph import embed_entity_names

    embed_entity_names(project.pk)
    elapsed = time.perf_counter() - started
    summary.add("generate (direct bulk insert, in process)", done, elapsed, "memories")
    print(
        f"generated {done} memories for {users} users in {elapsed:.0f}s ({done / elapsed:.0f}/s, "
        f"direct bulk insert with HNSW/GIN maintenance); largest user {sizes[0]}, median "
        f"{sorted(sizes)[len(sizes) // 2]}"
    )
    return sizes


def _flush(batch, real_every, offset, np_rng, embed, project_context, project) -> int:
    from memory.models import Memory, MemoryEntity
    from memory.text.recognise import normalise, recognise

    if not batch:
        return 0
    vectors = np_rng.normal(size=(len(batch), 384)).astype("float32")
    vectors /= (vectors**2).sum(axis=1, keepdims=True) ** 0.5
    real = [i for i in range(len(batch)) if (offset + i) % real_every == 0]
    if real:
        vectors[real] = embed([batch[i].text for i in real])
    for memory, vector in zip(batch, vectors, strict=True):
        memory.embedding = vector
    links = [
        MemoryEntity(
            project=project,
            memory=memory,
            entity_name=normalise(name),
            user_id=memory.user_id,
        )
        for memory in batch
        for name, _ in recognise(memory.text)
    ]
    with project_context(project.pk):
        Memory.objects.bulk_create(batch)
        MemoryEntity.objects.bulk_create(links, ignore_conflicts=True)
    return len(batch)


def measure_db(
    project: Any, sizes: list[int], queries: int, rng: random.Random, summary: RunSummary
) -> list[float]:
    from django.db import connection

    from memory.models import Memory
    from memory.retrieval.search import STATEMENT_STARTS, hybrid_search
    from memory.text.embeddings import embed
    from memory.text.query import analyse
    from tenants.db import project_context

    texts = [sentence(rng) for _ in range(queries)]
    users = [rng.randrange(len(sizes)) for _ in range(queries)]
    vectors = embed(texts)
    timings: list[float] = []

    def timer(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if sql.startswith(STATEMENT_STARTS):
                timings.append((time.perf_counter() - started) * 1000)

    with (
        summary.phase("search in process (query embedding precomputed)", "searches") as rate,
        project_context(project.pk),
        connection.execute_wrapper(timer),
    ):
        rate.count = queries
        for text, user, vector in zip(texts, users, vectors, strict=True):
            scope = (
                Memory.objects.for_project(project)
                .active()
                .filter(user_id=f"user-{user}", agent_id=None, app_id=None, run_id=None)
            )
            hybrid_search(
                scope, analyse(text, embedding=[float(x) for x in vector]), top_k=10,
                threshold=0, exact=True,
            )  # fmt: skip
    return timings


def explain_one(project, sizes: list[int]) -> str:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory.models import Memory
    from memory.retrieval.search import hybrid_search
    from memory.text.query import analyse
    from tenants.db import project_context

    with project_context(project.pk):
        scope = (
            Memory.objects.for_project(project)
            .active()
            .filter(user_id="user-0", agent_id=None, app_id=None, run_id=None)
        )
        with CaptureQueriesContext(connection) as captured:
            hybrid_search(
                scope, analyse("User likes the spicy recipe in Kyoto"), top_k=10, threshold=0
            )
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + captured.captured_queries[-1]["sql"])
            return "\n".join(row[0] for row in cursor.fetchall())


def measure_http(api: Api, sizes: list[int], queries: int, rng: random.Random) -> list[float]:
    timings = []
    for _ in range(queries):
        body = {
            "query": sentence(rng),
            "filters": {"user_id": f"user-{rng.randrange(len(sizes))}"},
            "top_k": 10,
        }
        timings.append(api.call("POST", "/v3/memories/search/", json=body)[1])
    return timings


def measure_add(
    api: Api, total: int, batch: int, concurrency: int, rng: random.Random
) -> tuple[int, float, list[float]]:
    """Raw adds into scopes no earlier run used (a run tag in the user ids), so every text is
    new: a repeated text in the same scope is answered NONE without a write, which would
    inflate the rate. Returns (memories stored, wall seconds, per-request ms)."""
    from concurrent.futures import ThreadPoolExecutor

    run = f"{int(time.time())}-{rng.randrange(10**6)}"
    bodies = []
    for start in range(0, total, batch):
        count = min(batch, total - start)
        messages = [{"role": "user", "content": sentence(rng)} for _ in range(count)]
        user_id = f"adder-{run}-{start // 1000}"
        bodies.append({"messages": messages, "user_id": user_id, "infer": False})

    def add(body: dict[str, Any]) -> tuple[int, float]:
        answer, elapsed = api.call("POST", "/v3/memories/add/", json=body)
        results = answer.get("results", []) if isinstance(answer, dict) else answer
        return sum(1 for r in results if r.get("event") == "ADD"), elapsed

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        outcomes = list(pool.map(add, bodies))
    stored = sum(n for n, _ in outcomes)
    return stored, time.perf_counter() - started, [t for _, t in outcomes]


def reuse():
    """The newest generated data set and a fresh key for it, instead of generating again."""
    from django.db.models import Count

    from memory.models import Memory
    from tenants.actions import do_create_api_key
    from tenants.db import project_context
    from tenants.models import Project

    project = Project.objects.filter(organization__name="bench", name__startswith="search-").latest(
        "created_at"
    )
    with project_context(project.pk):
        counts = dict(
            Memory.objects.filter(project=project, user_id__startswith="user-")
            .values("user_id")
            .annotate(n=Count("id"))
            .values_list("user_id", "n")
        )
    sizes = [counts.get(f"user-{i}", 0) for i in range(len(counts))]
    print(f"reusing {project.name}: {sum(sizes)} memories for {len(sizes)} users")
    return do_create_api_key(org_name="bench", project_name=project.name), sizes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument(
        "--real-embeddings", type=int, default=5_000, help="how many get real vectors"
    )
    parser.add_argument("--add-memories", type=int, default=3_000)
    parser.add_argument("--add-batch", type=int, default=100)
    parser.add_argument("--add-concurrency", type=int, default=2, help="parallel add requests")
    parser.add_argument(
        "--reuse", action="store_true", help="measure the last generated data set again"
    )
    parser.add_argument("--host", default=default_host())
    parser.add_argument(
        "--also-host",
        action="append",
        default=[],
        help="measure HTTP search through this server too (e.g. the entity signal off)",
    )
    parser.add_argument(
        "--explain", action="store_true", help="print EXPLAIN ANALYZE of one search"
    )
    args = parser.parse_args()

    import django

    django.setup()
    from tenants.actions import do_create_api_key

    rng = random.Random(42)
    print(f"command: {' '.join(sys.argv)}")
    summary = RunSummary.start(args.host, *args.also_host)
    if args.reuse:
        new, sizes = reuse()
    else:
        new = do_create_api_key(org_name="bench", project_name=f"search-{int(time.time())}")
        sizes = generate(
            new.key.project, args.memories, args.users, args.real_embeddings, rng, summary
        )
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_memory")
        cursor.execute("ANALYZE memory_memoryentity")
    db = measure_db(new.key.project, sizes, args.queries, random.Random(44), summary)
    print(
        "search, database time (the statement only; top_k=10): "
        f"{fmt_ms(percentiles(db))} over {len(db)} queries"
    )
    if args.explain:
        print(explain_one(new.key.project, sizes))
    for host in [args.host, *args.also_host]:
        api = Api(host, new.raw)
        for _ in range(20):  # each web worker loads the embedding model on its first search
            body = {"query": "warm up", "filters": {"user_id": "user-1"}}
            api.call("POST", "/v3/memories/search/", json=body)
        with summary.phase(f"search via {host} (HTTP)", "searches") as rate:
            http = measure_http(api, sizes, args.queries, random.Random(43))
            rate.count = len(http)
        print(
            f"search, HTTP time via {host} (incl. query embedding, top_k=10): "
            f"{fmt_ms(percentiles(http))} over {len(http)} queries"
        )
    api = Api(args.host, new.raw)
    if args.add_memories:
        stored, seconds, add_times = measure_add(
            api, args.add_memories, args.add_batch, args.add_concurrency, rng
        )
        label = f"add (infer=false, HTTP, {args.add_concurrency} clients)"
        added = summary.add(label, stored, seconds, "memories")
        print(
            f"add (infer=false) through HTTP, batches of {args.add_batch}, "
            f"{args.add_concurrency} clients: {added.per_second:.0f} memories/s ({stored} of "
            f"{args.add_memories} stored as new); per request {fmt_ms(percentiles(add_times))}"
        )
    summary.report()


if __name__ == "__main__":
    main()
