"""Fault injection on the extraction worker (issue #13), with real processes.

A real `dramatiq config.worker` (1 process, 2 threads, as scripts/run.sh starts it) on the
Postgres broker, the real sweeper (`manage.py sweep_events --loop`), and the fake Anthropic API
driven through the real SDK:

- a worker killed with SIGKILL mid-event, and the broker's queue rows deleted: every accepted
  event still completes exactly once (one run applied, its memories and history written once,
  its usage counted once);
- the model API answering 500s, 429s (with Retry-After) and timeouts for OUTAGE_SECONDS: events
  wait and retry, none fails for good, none is lost (all complete once the model is back), and
  the HTTP API answers meanwhile.

The retry schedule itself (extraction.pipeline.backoff) is checked against the default settings:
the attempts of an event span minutes, not seconds.
"""

from __future__ import annotations

import configparser
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from memory import jobs
from memory.extraction import pipeline
from memory.extraction.llm.claude import ClaudeExtractor
from memory.models import Memory, MemoryEvent, MemoryHistory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import auth, make_key
from tests.fake_anthropic import FakeClaude, Reply
from tests.memory.test_events import ROOT, database_url, stop, wait_for
from tests.memory.test_poison_events import drop_messages, queue_sql
from tests.memory.test_worker_limits import children
from tests.webhooks.receiver import closed_port

# How long the model API is down in the outage test, from its first call. The issue says a
# minute; the test takes 12 s with the event backoff at a quarter of the default (250 ms), which
# the default 10 attempts outlast (with the former default of 4, its events end FAILED).
OUTAGE_SECONDS = float(os.environ.get("ENGRAM_FAULTS_OUTAGE_SECONDS", "12"))
PETS = ("cat", "dog", "parrot", "tortoise")  # one add request (and one user) each
FACT_USAGE = (120, 40)  # the fake's tokens for one record_facts call


# --- Helpers ----------------------------------------------------------------------------------


def start(log: Path, *argv: str, **env: str) -> subprocess.Popen[str]:
    """A real engram process (worker or sweeper) on the test database, its output in `log`.

    In a session of its own, so stop() signals it and every process it forked.
    """
    environ = {**os.environ, "DATABASE_URL": database_url(), "ENGRAM_LOG_LEVEL": "WARNING", **env}
    with log.open("a") as out:
        return subprocess.Popen(
            argv, cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip


def start_worker(log: Path, fake: FakeClaude, **env: str) -> subprocess.Popen[str]:
    """`dramatiq config.worker --processes 1 --threads 2`, as scripts/run.sh starts it."""
    claude = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url}
    dramatiq = [sys.executable, "-m", "dramatiq", "config.worker"]
    return start(log, *dramatiq, "--processes", "1", "--threads", "2", **claude, **env)


def start_sweeper(log: Path) -> subprocess.Popen[str]:
    """The real sweeper, every second, patient for one second with PENDING events."""
    manage = [sys.executable, "manage.py", "sweep_events"]
    return start(log, *manage, "--loop", "1", "--pending-seconds", "1", "-v", "1")


def resent(log: Path) -> int:
    """How many events the sweeper re-sent, from its output ("re-sent N events" per pass)."""
    lines = log.read_text().splitlines()
    return sum(int(line.split()[1]) for line in lines if line.startswith("re-sent "))


def pet_model(body: dict[str, Any]) -> dict[str, Any]:
    """A fake Claude for the PETS add requests: the fact names the pet of the new message."""
    new = body["messages"][0]["content"].split("## New messages")[-1]
    pet = next(p for p in PETS if f"my {p}" in new)
    return {"facts": [{"text": f"User has a {pet}", "confidence": 1, "positions": [0]}]}


def facts_asked(fake: FakeClaude) -> int:
    """How many fact extraction calls the fake model has been asked."""
    calls = [r["body"]["tool_choice"]["name"] for r in fake.requests]
    return calls.count("record_facts")


class Scene:
    """One project, one add request per pet (each for its own user), and what became of them."""

    def __init__(self, name: str) -> None:
        self.key = make_key("acme", name)
        self.project = self.key.key.project_id
        self.events: dict[str, str] = {}  # pet -> event id

    def add(self, api: httpx.Client, pet: str) -> None:
        body = {"messages": f"I adopted my {pet} last week.", "user_id": f"{pet}-owner"}
        response = api.post("/v3/memories/add/", json=body, headers=auth(self.key.raw))
        assert response.status_code == 200, response.text  # accepted
        self.events[pet] = response.json()["event_id"]

    def rows(self) -> dict[str, MemoryEvent]:
        with project_context(self.project):
            found = MemoryEvent.objects.in_bulk(list(self.events.values()))
        return {pet: found[uuid.UUID(event_id)] for pet, event_id in self.events.items()}

    def statuses(self) -> set[str]:
        return {event.status for event in self.rows().values()}

    def done(self) -> bool:
        return self.statuses() <= {"SUCCEEDED", "FAILED"}

    def assert_applied_once(self) -> None:
        """Each event SUCCEEDED with one ADD: one memory, one history row, one run's usage."""
        rows = self.rows()
        assert {pet: event.status for pet, event in rows.items()} == dict.fromkeys(
            rows, "SUCCEEDED"
        )
        with project_context(self.project):
            for pet, event in rows.items():
                text = f"User has a {pet}"
                memories = list(Memory.objects.filter(user_id=f"{pet}-owner"))
                assert [m.text for m in memories] == [text]
                assert [(r["event"], r["memory"]) for r in event.results] == [("ADD", text)]
                history = MemoryHistory.objects.filter(event_id=event.id)
                assert [(h.event, h.memory_id) for h in history] == [("ADD", memories[0].id)]
                usage = event.usage
                assert (usage["input_tokens"], usage["output_tokens"]) == FACT_USAGE, usage
            assert Memory.objects.count() == len(rows)
        # Graph calls cost no tokens in the fake: one record_facts call was counted per event,
        # and each event made the same calls.
        assert len({event.usage["calls"] for event in rows.values()}) == 1

    def clear_queue(self) -> None:
        """Remove what the broker still holds for this scene (its commits outlive the test)."""
        ids = [*self.events.values(), str(self.project)]
        drop_messages(*(uuid.UUID(i) for i in self.events.values()))
        queue_sql(
            "DELETE FROM dramatiq.queue WHERE message->'args'->>0 = ANY(%s) "
            "OR message->'args'->>1 = ANY(%s)",
            ids, ids,
        )  # fmt: skip


def queued(event_ids: list[str]) -> list[tuple[str, str]]:
    """(event id, state) of the process_event messages the queue table holds for `event_ids`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT message->'args'->>0, state::text FROM dramatiq.queue "
            "WHERE message->>'actor_name' = 'process_event' AND message->'args'->>0 = ANY(%s)",
            [event_ids],
        )
        return [(row[0], row[1]) for row in cursor.fetchall()]


@pytest.fixture
def api(live_api: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_api, timeout=10) as client:
        yield client


# --- A worker killed mid-event, its queue rows gone ---------------------------------------------


def test_every_event_completes_once_after_a_killed_worker_and_a_lost_queue(
    api: httpx.Client, fake_claude: FakeClaude, tmp_path: Path
) -> None:
    scene = Scene("killed-worker")
    processes: list[subprocess.Popen[str]] = []
    try:
        # The model answers slowly: each of the worker's two threads is mid-event, waiting.
        fake_claude.script(Reply(respond=pet_model, repeat=True, delay=30))
        for pet in PETS:
            scene.add(api, pet)
        # Claims last 2 s, so the sweeper may take the dead worker's events over soon.
        first = start_worker(tmp_path / "first.log", fake_claude, ENGRAM_EVENT_LEASE_SECONDS="2",
                             ENGRAM_LLM_MAX_RETRIES="0", ENGRAM_LLM_TIMEOUT="60")  # fmt: skip
        processes.append(first)

        assert wait_for(lambda: facts_asked(fake_claude) == 2, seconds=60), (
            tmp_path / "first.log"
        ).read_text()
        stop(first, signal.SIGKILL)  # the worker and its forked process, mid-event
        before = scene.rows()
        in_flight = {pet for pet, event in before.items() if event.status == "RUNNING"}
        assert len(in_flight) == 2 and all(before[p].attempts == 1 for p in in_flight)
        assert {before[p].status for p in set(PETS) - in_flight} == {"PENDING"}
        # The messages the dead worker held (those it ran, and those it had prefetched) and any
        # still waiting: one row per event, all deleted.
        ids = list(scene.events.values())
        states = [state for _, state in queued(ids)]
        assert len(states) == len(PETS) and states.count("consumed") >= 2, states
        drop_messages(*(uuid.UUID(i) for i in ids))
        assert queued(ids) == []

        with fake_claude.lock:  # the model answers at once from now on
            fake_claude.replies[:] = [Reply(respond=pet_model, repeat=True)]
        processes.append(start_worker(tmp_path / "second.log", fake_claude))
        processes.append(start_sweeper(tmp_path / "sweeper.log"))
        assert wait_for(scene.done, seconds=60), (
            scene.statuses(),
            (tmp_path / "second.log").read_text(),
        )
    finally:
        for process in processes:
            stop(process)
    scene.assert_applied_once()
    after = scene.rows()
    # The killed runs count as attempts; nothing ran a third time.
    assert {pet: event.attempts for pet, event in after.items()} == {
        pet: 2 if pet in in_flight else 1 for pet in PETS
    }
    # The sweeper sent each lost event once, and the queue holds nothing more for them.
    assert resent(tmp_path / "sweeper.log") == len(PETS)
    assert queued(list(scene.events.values())) == []
    # Two calls cut off by the kill, then one per event.
    assert facts_asked(fake_claude) == 2 + len(PETS)
    scene.clear_queue()


# --- The model API down for a while -----------------------------------------------------------


class Outage:
    """500s, 429s with Retry-After, 529s and timeouts in turn, for `seconds` from the first call
    (so every event waits out all of it, however long the worker took to start)."""

    def __init__(self, seconds: float, timeout: float) -> None:
        self.seconds = seconds
        self.ends = 0.0
        self.kinds = itertools.cycle([
            ("500", Reply(status=500, error_type="api_error")),
            ("429", Reply(status=429, error_type="rate_limit_error", headers={"retry-after": "2"})),
            ("529", Reply(status=529, error_type="overloaded_error")),
            ("timeout", Reply(delay=timeout + 0.5)),  # answered after the client gave up
        ])  # fmt: skip
        self.served: dict[str, int] = {}

    def down(self) -> bool:
        return not self.ends or time.monotonic() < self.ends

    def __call__(self) -> Reply | None:
        self.ends = self.ends or time.monotonic() + self.seconds
        if not self.down():
            return None
        kind, reply = next(self.kinds)
        self.served[kind] = self.served.get(kind, 0) + 1
        return reply


def test_events_wait_out_a_model_outage_and_the_api_answers_meanwhile(
    api: httpx.Client, fake_claude: FakeClaude, tmp_path: Path
) -> None:
    scene = Scene("model-outage")
    outage = Outage(OUTAGE_SECONDS, timeout=1)
    fake_claude.outage = outage
    fake_claude.script(Reply(respond=pet_model, repeat=True))
    seen: set[str] = set()
    probes: list[tuple[str, int, float]] = []  # (what, status, seconds) during the outage
    processes: list[subprocess.Popen[str]] = []
    try:
        for pet in PETS[:2]:
            scene.add(api, pet)
        # One call per attempt (no SDK retries), a 1 s timeout, and the default attempts with
        # the backoff a quarter of the default: its doubling still outlasts the outage.
        quick = {"ENGRAM_LLM_TIMEOUT": "1", "ENGRAM_LLM_MAX_RETRIES": "0"}
        worker = start_worker(
            tmp_path / "worker.log", fake_claude, **quick, ENGRAM_EVENT_BACKOFF_MS="250"
        )
        processes += [worker, start_sweeper(tmp_path / "sweeper.log")]
        search = {"query": "Which pet does the user have?", "filters": {"user_id": "cat-owner"}}
        headers = auth(scene.key.raw)
        give_up = time.monotonic() + OUTAGE_SECONDS + 60  # a worker that never calls the model
        while outage.down() and time.monotonic() < give_up:
            if len(scene.events) < len(PETS):  # requests keep being accepted meanwhile
                scene.add(api, PETS[len(scene.events)])
            for what, method, path, body in (
                ("ping", "GET", "/v1/ping/", None),
                ("search", "POST", "/v3/memories/search/", search),
            ):
                began = time.perf_counter()
                status = api.request(method, path, json=body, headers=headers).status_code
                probes.append((what, status, time.perf_counter() - began))
            seen |= scene.statuses()
            time.sleep(0.5)
        assert outage.ends, (tmp_path / "worker.log").read_text()  # it began, and it is over
        assert "SUCCEEDED" not in seen and scene.statuses() <= {"PENDING", "RUNNING"}

        def finished() -> bool:
            seen.update(scene.statuses())
            return scene.done()

        assert wait_for(finished, seconds=90), (
            scene.statuses(),
            (tmp_path / "worker.log").read_text(),
        )
    finally:
        for process in processes:
            stop(process)
    assert "FAILED" not in seen  # none failed for good, at any point
    assert len(scene.events) == len(PETS)
    scene.assert_applied_once()
    # Every event tried during the outage and again after it, within its attempts.
    attempts = [event.attempts for event in scene.rows().values()]
    assert all(1 < n <= settings.ENGRAM_EVENT_MAX_ATTEMPTS for n in attempts), attempts
    assert set(outage.served) == {"500", "429", "529", "timeout"}, outage.served
    # The API answered throughout (the client gives up after 10 s).
    assert {(what, status) for what, status, _ in probes} == {("ping", 200), ("search", 200)}
    # Every event kept its one message in the queue while it waited: the sweeper re-sent none.
    assert resent(tmp_path / "sweeper.log") == 0
    took = sorted(seconds * 1000 for _, _, seconds in probes)
    print(
        f"outage {OUTAGE_SECONDS:.0f} s: {len(took)} probes, median {median(took):.0f} ms, "
        f"slowest {took[-1]:.0f} ms; attempts {sorted(attempts)}; model {outage.served}"
    )
    scene.clear_queue()


# --- The retry schedule -----------------------------------------------------------------------


def test_the_default_retry_budget_spans_minutes() -> None:
    """With the default settings, the waits between an event's attempts add up to 13.5 min:
    2, 4, 8 ... 256 s, then 300 s (the cap), so a model API outage of minutes fails nothing."""
    waits = [pipeline.backoff(n) for n in range(1, settings.ENGRAM_EVENT_MAX_ATTEMPTS)]
    assert (settings.ENGRAM_EVENT_MAX_ATTEMPTS, settings.ENGRAM_EVENT_BACKOFF_MS) == (10, 1000)
    assert waits == [2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000]
    assert sum(waits) == 810_000


def test_the_backoff_waits_as_long_as_the_model_asks_within_the_cap() -> None:
    assert pipeline.backoff(1, asked=30) == 30_000  # Retry-After: 30 over a 2 s backoff
    assert pipeline.backoff(4, asked=0.5) == 16_000  # a shorter ask does not shorten it
    assert pipeline.backoff(1, asked=3600) == pipeline.MAX_BACKOFF_MS == 300_000
    assert pipeline.backoff(30) == 300_000


class RetryAfterTestCase(BaseTestCase):
    """A 429 asking for a wait longer than a worker sleeps ends the attempt (the SDK does not
    retry it); the event's next attempt is delayed by what the model asked."""

    @pytest.fixture(autouse=True)
    def _claude(self, fake_claude: FakeClaude) -> Iterator[None]:
        self.fake = fake_claude
        with override_settings(ENGRAM_EVENT_BACKOFF_MS=1000):
            yield

    def test_the_next_attempt_comes_after_the_retry_after(self) -> None:
        self.fake.script(
            Reply(status=429, error_type="rate_limit_error", headers={"retry-after": "45"})
        )
        scope = {"user_id": "alice", "agent_id": None, "app_id": None, "run_id": None}
        project = self.alice.key.project
        with project_context(project.pk):
            payload = {"messages": [{"role": "user", "content": "I like tea"}], "scope": scope}
            event = MemoryEvent.objects.create(project=project, payload=payload, **scope)
        extractor = ClaudeExtractor(api_key="sk-test", base_url=self.fake.url, model="m",
                                    max_tokens=512, timeout=5, max_retries=2)  # fmt: skip
        assert pipeline.attempt(event.id, project.pk, extractor) == 45_000
        assert len(self.fake.requests) == 1  # not retried inside the attempt
        with project_context(project.pk):
            after = MemoryEvent.objects.get(pk=event.pk)
        assert (after.status, after.attempts) == ("PENDING", 1)
        assert "RateLimitError" in after.error


# --- make run's supervisor: a worker process killed by SIGKILL ---------------------------------


def supervised(run_dir: Path, fake: FakeClaude, **env: str) -> subprocess.Popen[str]:
    """supervisord with make run's config (config/supervisord.conf) on the test database: the
    web server on a free port, both workers, the sweeper every second."""
    settings_env = {
        "ENGRAM_ROOT": str(ROOT), "ENGRAM_BIN": str(Path(sys.executable).parent),
        "ENGRAM_RUN_DIR": str(run_dir), "ENGRAM_BIND": f"127.0.0.1:{closed_port()}",
        "ENGRAM_WORKER_THREADS": "1", "ENGRAM_WEBHOOK_THREADS": "1", "ENGRAM_SWEEP_SECONDS": "1",
        "ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url, **env,
    }  # fmt: skip
    supervisord = [
        str(Path(sys.executable).parent / "supervisord"),
        "-c",
        "config/supervisord.conf",
    ]
    return start(run_dir / "out.log", *supervisord, **settings_env)


def program_pid(run_dir: Path, name: str) -> int:
    """The pid supervisord reports for a program (0 while it is not running)."""
    ctl = Path(sys.executable).parent / "supervisorctl"
    answer = subprocess.run(
        [str(ctl), "-s", f"unix://{run_dir}/supervisor.sock", "pid", name],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    return int(answer.stdout.strip()) if answer.stdout.strip().isdigit() else 0


def test_a_worker_process_killed_by_sigkill_is_replaced_and_its_event_completes(
    api: httpx.Client, fake_claude: FakeClaude
) -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="engram-sv-"))  # a unix socket's path is short
    scene = Scene("supervised-worker")
    fake_claude.script(Reply(respond=pet_model, repeat=True, delay=30))  # mid-event at the kill
    scene.add(api, "cat")
    quick = {"ENGRAM_EVENT_LEASE_SECONDS": "3", "ENGRAM_WORKER_HEARTBEAT_SECONDS": "4"}
    process = supervised(run_dir, fake_claude, **quick, ENGRAM_LLM_MAX_RETRIES="0")
    try:
        assert wait_for(lambda: len(fake_claude.requests) == 1, seconds=60), (
            run_dir / "out.log"
        ).read_text()
        master = program_pid(run_dir, "worker")
        [child] = children(master)  # Dramatiq's one worker process
        os.kill(child, signal.SIGKILL)  # as the OOM killer does
        with fake_claude.lock:  # the model answers at once from now on
            fake_claude.replies[:] = [Reply(respond=pet_model, repeat=True)]
        # Dramatiq's master stops and exits; supervisord starts the worker again.
        assert wait_for(lambda: program_pid(run_dir, "worker") not in (0, master), seconds=30), (
            run_dir / "out.log"
        ).read_text()
        assert wait_for(scene.done, seconds=90), (
            scene.statuses(),
            (run_dir / "out.log").read_text(),
        )
    finally:
        stop(process)
        shutil.rmtree(run_dir, ignore_errors=True)
    scene.assert_applied_once()
    [event] = scene.rows().values()
    assert event.attempts == 2  # the killed attempt, then the one that succeeded
    scene.clear_queue()


def test_the_two_workers_consume_every_queue_once() -> None:
    """make run's supervisor and the compose file split the queues between the extraction
    worker and the webhook worker: together, every queue of memory.jobs, each once."""
    conf = configparser.ConfigParser(interpolation=None)
    conf.read(ROOT / "config" / "supervisord.conf")
    compose = (ROOT / "docker" / "compose.yaml").read_text()
    queues = set(jobs.project_args())
    for source in (
        [conf[f"program:{p}"]["command"] for p in ("worker", "webhooks")],
        [
            line
            for line in compose.splitlines()
            if '"config.worker"' in line or '"--queues"' in line
        ],
    ):
        named: list[str] = []
        for command in source:
            words = command.replace('"', " ").replace(",", " ").replace("]", " ").split()
            if "--queues" in words:
                named += words[words.index("--queues") + 1 :]
        assert sorted(named) == sorted(queues), (source, queues)
