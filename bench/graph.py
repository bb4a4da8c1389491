"""Graph storage figures on the real database (AGE through memory.graph, as the app role).

In a fresh project: one scope with E edges (default 10,000) among N entities (default 2,000),
written one upsert_relation per transaction (the throughput figure), then traversals from
random entities at depth 1, 2 and 3 (limit 100) and the valid edges touching two entities
(relations_touching, what extraction's contradiction check reads): p50 / p95; then the linking
job's throughput on raw turns (graph.link_mentions, --link-memories). Also prints the plans of
the entity lookup, of relations_touching's lookup and of one traversal step. Every timed call has
p50/p95/p99; the run summary (common.RunSummary) at the end has each operation's count per
second and the peak RSS of this process, postgres and any Dramatiq worker.

    make migrate
    .venv/bin/python bench/graph.py [--edges 10000 --entities 2000 --traversals 300]
    .venv/bin/python bench/graph.py --plans   # only the plans, on the last generated graph
    (the environment of .local/engram.env is read)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")

from common import RunSummary, fmt_ms, load_local_env, percentiles

load_local_env()

RELATIONSHIPS = ["knows", "likes", "works at", "lives in", "visited", "owns", "uses", "met"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edges", type=int, default=10_000)
    parser.add_argument("--entities", type=int, default=2_000)
    parser.add_argument("--traversals", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--link-memories", type=int, default=500)
    parser.add_argument("--plans", action="store_true", help="only the plans, on the last data set")
    args = parser.parse_args()

    import django

    django.setup()
    from memory import graph
    from tenants.actions import do_create_api_key

    rng = random.Random(args.seed)
    if args.plans:
        from tenants.models import Project

        last = Project.objects.filter(organization__name="bench", name__startswith="graph-")
        plans(last.latest("created_at").pk, graph.Scope(user_id="bench-user"), "entity 0")
        return
    summary = RunSummary.start()
    project = do_create_api_key(
        org_name="bench", project_name=f"graph-{int(time.time())}"
    ).key.project_id
    scope = graph.Scope(user_id="bench-user")
    entities = [f"entity {i}" for i in range(args.entities)]
    made = write_edges(project, scope, entities, rng, args.edges, summary)
    merge_edges(project, scope, rng.sample(sorted(made), min(1000, len(made))), summary)
    for depth in (1, 2, 3):
        traverse_figures(project, scope, entities, rng, depth, args.traversals, summary)
    touching_figures(project, scope, entities, rng, args.traversals, summary)
    link_figures(project, rng, args.link_memories, summary)
    plans(project, scope, entities[0])
    summary.report()


def upsert(project: Any, scope: Any, triple: tuple[str, str, str], timings: list[float]) -> None:
    from memory import graph

    started = time.perf_counter()
    graph.upsert_relation(project, *triple[:2], triple[2], scope)
    timings.append((time.perf_counter() - started) * 1000)


def write_edges(
    project: Any,
    scope: Any,
    entities: list[str],
    rng: random.Random,
    count: int,
    summary: RunSummary,
) -> set[tuple[str, str, str]]:
    """`count` new edges among `entities`, one upsert_relation (one transaction) each."""
    made: set[tuple[str, str, str]] = set()
    timings: list[float] = []
    with summary.phase("upsert_relation, new edges", "edges") as rate:
        while len(made) < count:
            triple = (rng.choice(entities), rng.choice(RELATIONSHIPS), rng.choice(entities))
            if triple[0] == triple[2] or triple in made:
                continue
            made.add(triple)
            upsert(project, scope, triple, timings)
            if len(made) % 2000 == 0:
                print(f"  {len(made)} edges", flush=True)
        rate.count = len(made)
    print(
        f"upsert_relation: {count} new edges in {rate.seconds:.1f} s = "
        f"{rate.per_second:.0f}/s (one transaction each); {fmt_ms(percentiles(timings))}"
    )
    return made


def merge_edges(
    project: Any, scope: Any, triples: list[tuple[str, str, str]], summary: RunSummary
) -> None:
    timings: list[float] = []
    with summary.phase("upsert_relation, existing edges (merge)", "edges") as rate:
        for triple in triples:
            upsert(project, scope, triple, timings)
        rate.count = len(triples)
    print(
        f"upsert_relation of existing edges (merge): {rate.per_second:.0f}/s; "
        f"{fmt_ms(percentiles(timings))}"
    )


def traverse_figures(
    project: Any,
    scope: Any,
    entities: list[str],
    rng: random.Random,
    depth: int,
    count: int,
    summary: RunSummary,
) -> None:
    from memory import graph

    samples, sizes = [], []
    with summary.phase(f"traverse depth {depth} (limit 100)", "traversals") as rate:
        for _ in range(count):
            start = time.perf_counter()
            found = graph.traverse(project, scope, rng.choice(entities), depth=depth, limit=100)
            samples.append((time.perf_counter() - start) * 1000)
            sizes.append(len(found.relations))
        rate.count = count
    sizes.sort()
    print(
        f"traverse depth {depth} (limit 100): {fmt_ms(percentiles(samples))}; "
        f"relations returned median {sizes[len(sizes) // 2]}"
    )


def touching_figures(
    project: Any,
    scope: Any,
    entities: list[str],
    rng: random.Random,
    count: int,
    summary: RunSummary,
) -> None:
    from memory import graph

    samples = []
    with summary.phase("relations_touching 2 entities (limit 50)", "calls") as rate:
        for _ in range(count):
            names = rng.sample(entities, 2)
            start = time.perf_counter()
            graph.relations_touching(project, scope, names, limit=50)
            samples.append((time.perf_counter() - start) * 1000)
        rate.count = count
    print(
        "relations_touching 2 entities (extraction's contradiction check, limit 50): "
        f"{fmt_ms(percentiles(samples))}"
    )


PEOPLE = ["Caroline", "Melanie", "Jon", "Gina", "Andrew", "Audrey", "Tim", "John", "Maria"]
PLACES = ["Boston", "Lisbon", "Kyoto", "Sweden", "Paris", "the Grand Canyon", "Nike", "Google"]


def link_figures(project: Any, rng: random.Random, count: int, summary: RunSummary) -> None:
    """The linking job's throughput: raw turns naming people and places (as LoCoMo's do), stored
    with do_add_messages in one scope, then linked by graph.link_mentions as the worker does;
    then the same again (a re-run links nothing)."""
    from memory import actions, graph
    from tenants.models import Project

    texts = [
        f"{rng.choice(PEOPLE)} told me about {rng.choice(PLACES)} and {rng.choice(PEOPLE)}; "
        f"I want to visit {rng.choice(PLACES)} in {2020 + i % 5} (turn {i})."
        for i in range(count)
    ]
    outcome = actions.do_add_messages(
        Project.objects.get(pk=project),
        messages=[actions.Message("user", t) for t in texts],
        scope={"user_id": "link-user", "agent_id": None, "app_id": None, "run_id": None},
        actor="command:bench",
    )
    ids = [m.pk for m, _ in outcome.results]
    for label in ("first run", "re-run"):
        with summary.phase(f"link_mentions, {label}", "memories") as rate:
            made = graph.link_mentions(project, ids)
            rate.count = count
        elapsed = rate.seconds
        print(
            f"link_mentions, {label}: {count} memories, {made} new links in {elapsed:.1f} s = "
            f"{count / elapsed:.0f} memories/s, {made / elapsed:.0f} links/s"
        )


def plans(project: Any, scope: Any, entity: str) -> None:
    """EXPLAIN ANALYZE of the entity lookup (Cypher) and of one traversal step (SQL)."""
    import psycopg
    from django.db import connection

    from memory import graph
    from memory.graph import statements
    from tenants.db import project_context

    with project_context(project):
        name = graph.ensure_graph(project)
        root = graph.find_entity(project, scope, entity)
        assert root is not None
        raw = connection.connection
        assert isinstance(raw, psycopg.Connection)
        with psycopg.Cursor(raw) as cursor:
            lookup = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "
            lookup += statements._ENTITY_BY_NAME.replace("{graph}", name)
            cursor.execute(lookup, [json.dumps(root.name), json.dumps(scope.key)])
            print("\nplan of the entity lookup (SQL, name and scope; what every upsert reads):")
            print("\n".join(row[0] for row in cursor.fetchall()))
            touching = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "
            touching += statements._ENTITIES_BY_NAMES.replace("{graph}", name)
            cursor.execute(touching, [[json.dumps(root.name), '"entity 1"'], json.dumps(scope.key)])
            print("\nplan of relations_touching's entity lookup (then a traversal step, below):")
            print("\n".join(row[0] for row in cursor.fetchall()))
        with connection.cursor() as cursor:
            cursor.execute(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "
                + statements._NEIGHBOURS_SQL.replace("{graph}", name),
                {
                    "frontier": f"{{{root.id}}}",
                    "seen": "{}",
                    "filter": json.dumps({"scope": scope.key, "valid": True}),
                    "limit": 100,
                },
            )
            print("\nplan of one traversal step (SQL over the label tables):")
            print("\n".join(row[0] for row in cursor.fetchall()))


if __name__ == "__main__":
    main()
