"""The worker under load: fair between projects on every queue, webhook deliveries capped per
project, and restarted after its limit.

Against a real `dramatiq config.worker` process (offline extractor) on the test database.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

import dramatiq
from django.test import override_settings

from memory import jobs
from memory.models import MemoryEvent
from tenants.db import project_context
from tests.factory import auth, make_key
from tests.memory.test_events import start_worker, stop, wait_for
from tests.memory.test_poison_events import queue_sql

BACKLOG = 24


def queue_add(client: Any, raw_key: str, text: str) -> str:
    body = {"messages": [{"role": "user", "content": text}], "user_id": "alice",
            "async_mode": True}  # fmt: skip
    response = client.post("/v1/memories/", body, content_type="application/json",
                           headers=auth(raw_key))  # fmt: skip
    assert response.status_code == 200, response.content
    return str(response.json()[0]["event_id"])


def unfinished(project_id: Any) -> int:
    with project_context(project_id):
        return MemoryEvent.objects.exclude(status="SUCCEEDED").count()


def completed(project_id: Any) -> list[Any]:
    """When each of the project's events completed, earliest first."""
    with project_context(project_id):
        return sorted(MemoryEvent.objects.values_list("completed_at", flat=True))


def test_one_projects_backlog_does_not_starve_another_project(
    committed_db: None, client: Any
) -> None:
    """Project A queues a backlog, then project B one add: B's add is taken as soon as a
    worker thread is free, while most of A's backlog still waits (first in, first out would
    run it last)."""
    busy, other = make_key("acme", "busy"), make_key("globex", "other")
    for n in range(BACKLOG):
        queue_add(client, busy.raw, f"I visited city number {n} this spring.")
    queue_add(client, other.raw, "I play the cello.")
    worker = start_worker()
    try:
        assert wait_for(lambda: unfinished(other.key.project_id) == 0), "B's add never ran"
        assert wait_for(lambda: unfinished(busy.key.project_id) == 0), "A's backlog stalled"
    finally:
        stop(worker)
    # One worker thread holds two messages (dramatiq's prefetch): B's add runs after at most
    # the first few of A's. Counted by the events' own completion times, not by polling (a
    # poll every 0.2 s sees B done some adds late).
    b_done = completed(other.key.project_id)[0]
    a_done = completed(busy.key.project_id)
    waiting = sum(done > b_done for done in a_done)
    assert waiting >= BACKLOG - 4, f"only {waiting} of A's {BACKLOG} adds were still waiting"


def claimed_projects(job: jobs.Job, backlog: uuid.UUID, other: uuid.UUID) -> list[list[str]]:
    """Five messages of `job` from project `backlog`, then one from `other`, claimed by the
    worker's consumer of the job's queue, 6 at a time: the projects of each claim's messages."""
    broker = dramatiq.get_broker()

    def message(project: uuid.UUID) -> dramatiq.Message[Any]:
        other_arg: Any = [str(uuid.uuid4())] if job.project_arg == 0 else str(uuid.uuid4())
        args = (str(project), other_arg) if job.project_arg == 0 else (other_arg, str(project))
        return job.message(*args)

    sent = [broker.enqueue(message(p)).message_id for p in [backlog] * 5 + [other]]
    consumer: Any = broker.consume(job.queue_name, prefetch=6)  # the library's consumer
    try:
        claims = []
        for _ in range(4):
            consumer.buffer.clear()
            consumer.claim(6)
            claims.append([m.args[job.project_arg] for m in consumer.buffer])
        return claims
    finally:
        consumer.close()
        queue_sql("DELETE FROM dramatiq.queue WHERE message_id = ANY(%s::uuid[])", sent)


def test_every_queue_is_claimed_fairly_between_projects(committed_db: None) -> None:
    """A project's backlog on any queue does not hold another project's message behind it:
    each claim takes one message per project, the other project's in the first."""
    a, b = uuid.uuid4(), uuid.uuid4()
    for job in jobs.JOBS:
        if job is jobs.DELIVER_WEBHOOK:
            continue
        claims = claimed_projects(job, a, b)
        assert sorted(claims[0]) == sorted([str(a), str(b)]), job
        assert claims[1:] == [[str(a)]] * 3, job


@override_settings(ENGRAM_WEBHOOK_PROJECT_CONCURRENCY=2)
def test_a_projects_webhook_deliveries_are_held_at_most_its_cap_at_once(
    committed_db: None,
) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    claims = claimed_projects(jobs.DELIVER_WEBHOOK, a, b)
    # Two of A's held, then A waits until one is done; B's was taken at once.
    assert sorted(claims[0]) == sorted([str(a), str(b)])
    assert claims[1:] == [[str(a)], [], []]


def children(pid: int) -> set[int]:
    """The ids of the processes whose parent is `pid`."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def test_the_worker_is_restarted_after_its_limit_and_loses_nothing(
    committed_db: None, client: Any
) -> None:
    key = make_key("acme", "recycled")
    # The dramatiq command restarts by running itself again; started as `python -m dramatiq`,
    # it runs `python` from PATH, which must be this interpreter.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    worker = start_worker(ENGRAM_WORKER_MAX_TASKS="2", PATH=path)
    try:
        assert wait_for(lambda: bool(children(worker.pid)))
        first = children(worker.pid)
        for n in range(5):
            queue_add(client, key.raw, f"I have {n + 2} cousins in Lisbon.")
        assert wait_for(lambda: unfinished(key.key.project_id) == 0), "an add was lost"
        assert wait_for(lambda: bool(children(worker.pid)) and not children(worker.pid) & first)
    finally:
        stop(worker)
