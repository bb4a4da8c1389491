"""A graceful stop (issue #51, part 6), with real processes and real signals.

- SIGTERM to the web server (a real gunicorn with the project's config): the request in flight
  finishes and is answered, then the server exits cleanly, within ENGRAM_WEB_GRACEFUL_SECONDS.
- SIGTERM to the worker (`dramatiq config.worker`, as scripts/run.sh starts it): the events it is
  running finish and are applied, the messages it had only prefetched go back to the queue, and
  it exits; a worker started next processes those, and every event is applied exactly once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.config.test_gunicorn import exchange, gunicorn_process, http_request
from tests.factory import make_key
from tests.fake_anthropic import FakeClaude, Reply
from tests.faults.test_worker_faults import PETS, Scene, facts_asked, pet_model, start_worker
from tests.memory.test_events import stop, wait_for


def test_sigterm_to_the_web_server_finishes_the_request_in_flight(
    committed_db: None, tmp_path: Path
) -> None:
    key = make_key("acme", "graceful")
    body = json.dumps(
        {"messages": "I live in Lisbon.", "user_id": "alice", "async_mode": False}
    ).encode()
    add = http_request(
        "/v3/memories/add/",
        f"Authorization: Token {key.raw}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        body=body,
        method="POST",
    )
    log = tmp_path / "gunicorn.log"
    answers: list[Any] = []
    # No worker runs: the synchronous add waits its 3 s, then answers 202 with the event.
    settings = {"ENGRAM_SYNC_ADD_WAIT_MS": "3000", "ENGRAM_WEB_GRACEFUL_SECONDS": "10"}
    with gunicorn_process(log, **settings) as (port, master):
        waiting = threading.Thread(target=lambda: answers.append(exchange(port, add)))
        waiting.start()
        time.sleep(1)  # the request is in flight
        stopped = time.monotonic()
        master.send_signal(signal.SIGTERM)
        waiting.join(timeout=20)
        assert answers, log.read_text()
        status, _, reply = answers[0]
        assert status == 202, reply  # answered, not cut off
        assert json.loads(reply)["status"] == "PENDING"
        master.wait(timeout=15)
        took = time.monotonic() - stopped
    assert took < 10, took  # within ENGRAM_WEB_GRACEFUL_SECONDS
    assert master.returncode == 0, log.read_text()


def test_sigterm_to_the_worker_finishes_its_events_and_requeues_the_rest(
    live_api: str, fake_claude: FakeClaude, tmp_path: Path
) -> None:
    scene = Scene("graceful-worker")
    processes: list[subprocess.Popen[str]] = []
    with httpx.Client(base_url=live_api, timeout=10) as api:
        try:
            # Each fact call takes 3 s: the worker's two threads are mid-event when it is told
            # to stop, the other two events only prefetched (or still queued).
            fake_claude.script(Reply(respond=pet_model, repeat=True, delay=3))
            for pet in PETS:
                scene.add(api, pet)
            first = start_worker(tmp_path / "first.log", fake_claude)
            processes.append(first)

            assert wait_for(lambda: facts_asked(fake_claude) == 2, seconds=60), (
                tmp_path / "first.log"
            ).read_text()
            stopped = time.monotonic()
            first.send_signal(signal.SIGTERM)  # the master, which tells its worker process
            first.wait(timeout=60)
            took = time.monotonic() - stopped
            rows = scene.rows()
            finished = {pet for pet, event in rows.items() if event.status == "SUCCEEDED"}
            assert len(finished) == 2, {p: e.status for p, e in rows.items()}  # not cut off
            assert {e.status for p, e in rows.items() if p not in finished} == {"PENDING"}
            assert facts_asked(fake_claude) == 2  # the worker started nothing after the signal

            with fake_claude.lock:
                fake_claude.replies[:] = [Reply(respond=pet_model, repeat=True)]
            processes.append(start_worker(tmp_path / "second.log", fake_claude))
            assert wait_for(scene.done, seconds=60), scene.statuses()
        finally:
            for process in processes:
                stop(process)
    scene.assert_applied_once()  # each event applied once, none run twice
    assert all(event.attempts == 1 for event in scene.rows().values())
    assert took < 30, took
    scene.clear_queue()
