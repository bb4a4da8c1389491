"""Extraction figures: the add request on the queue path, and the pipeline's own overhead.

1. `add` (infer=true) request latency through HTTP against a running server (`make run`):
   validate, write the event, send on commit, answer PENDING.
2. Pipeline throughput of one worker process with a fake Claude answering after a fixed delay
   (a local Messages API, as in the tests): events/s, and engram's own time per event with the
   model's time taken out, graph extraction included (one entity and one relation per turn,
   written to the AGE graph). Also model calls and tokens per conversation turn.

    .venv/bin/python bench/extraction.py [--requests 500] [--events 200] [--model-delay-ms 50]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")

from common import Api, default_host, fmt_ms, load_local_env, percentiles

load_local_env()

TOPICS = ["tea", "hiking", "Lisbon", "guitar", "a beagle", "chess", "sushi", "Kyoto"]


def turn(rng: random.Random) -> str:
    return f"I really like {rng.choice(TOPICS)} and I visited {rng.choice(TOPICS)} #{rng.randrange(10**6)}."


def topic(text: str) -> str:
    return text.removeprefix("I really like ").split(" and ")[0].removeprefix("a ")


def measure_requests(api: Api, count: int, rng: random.Random) -> list[float]:
    timings = []
    for i in range(count):
        body = {"messages": [{"role": "user", "content": turn(rng)}], "user_id": f"ext-{i % 50}"}
        timings.append(api.call("POST", "/v3/memories/add/", json=body)[1])
    return timings


def measure_pipeline(events: int, delay_ms: int, rng: random.Random) -> None:
    import django

    django.setup()
    from memory.extraction.llm import ClaudeExtractor
    from memory.extraction.pipeline import process_event
    from memory.models import MemoryEvent
    from tenants.actions import do_create_api_key
    from tenants.db import project_context
    from tests.fake_anthropic import FakeClaude, Reply, _handler

    fake = FakeClaude()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    claude = ClaudeExtractor(api_key="bench", base_url=fake.url, model="claude-haiku-5-5",
                             max_tokens=1024, timeout=30, max_retries=0)  # fmt: skip
    project = do_create_api_key(
        org_name="bench", project_name=f"extraction-{uuid.uuid4().hex[:6]}"
    ).key.project
    ids = []
    for i in range(events):
        text = turn(rng)
        fact = f"User says: {text}"
        fake.script(
            Reply(
                {"facts": [{"text": fact, "confidence": 0.9, "positions": [0]}]},
                delay=delay_ms / 1000,
            ),
            Reply(
                {"decisions": [{"fact": 0, "event": "ADD", "text": fact}]}, delay=delay_ms / 1000
            ),
            # The graph: the user and one topic, one relation; the contradiction check (once the
            # user has edges) finds none.
            Reply(
                {"entities": [{"name": "User", "type": "person"}, {"name": topic(text), "type": "topic"}]},
                delay=delay_ms / 1000, tool="record_entities",
            ),
            Reply(
                {"relations": [{"source": "User", "relationship": "likes", "destination": topic(text), "fact": 0}]},
                delay=delay_ms / 1000, tool="record_relations",
            ),
            Reply({"contradicted": []}, delay=delay_ms / 1000, tool="record_contradictions"),
        )  # fmt: skip
        payload = {"messages": [{"role": "user", "content": text}],
                   "scope": {"user_id": f"ext-{i % 20}", "agent_id": None, "app_id": None, "run_id": None}}  # fmt: skip
        with project_context(project.pk):
            ids.append(MemoryEvent.objects.create(project=project, payload=payload).pk)
    started = time.perf_counter()
    for event_id in ids:
        process_event(event_id, project.pk, claude)
    elapsed = time.perf_counter() - started
    with project_context(project.pk):
        done = list(MemoryEvent.objects.filter(pk__in=ids))
    ok = sum(e.status == "SUCCEEDED" for e in done)
    calls = sum(e.usage.get("calls", 0) for e in done)
    tokens = sum(e.usage.get("input_tokens", 0) + e.usage.get("output_tokens", 0) for e in done)
    own = elapsed - calls * delay_ms / 1000
    print(
        f"pipeline, 1 process, fake model answering in {delay_ms} ms: {ok}/{events} events in "
        f"{elapsed:.1f}s = {events / elapsed:.1f} events/s; engram's own time "
        f"{own / events * 1000:.1f} ms/event = {events / own:.1f} events/s excluding model time"
    )
    sent = sum(
        len(str(r["body"].get("system", ""))) + len(str(r["body"]["messages"]))
        for r in fake.requests
    )
    print(
        f"model calls per turn: {calls / events:.2f} (+1 summary refresh off the path); prompt text "
        f"sent per turn: {sent / events:.0f} characters, about {sent / events / 4:.0f} input tokens "
        f"(tool schemas not counted; the fake reports {tokens / events:.0f} tokens of usage)"
    )
    server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--model-delay-ms", type=int, default=50)
    parser.add_argument("--host", default=default_host())
    args = parser.parse_args()
    rng = random.Random(7)
    print(f"command: {' '.join(sys.argv)}")
    measure_pipeline(args.events, args.model_delay_ms, rng)
    from tenants.actions import do_create_api_key

    key = do_create_api_key(org_name="bench", project_name="extraction-http").raw
    api = Api(args.host, key)
    timings = measure_requests(api, args.requests, rng)
    print(
        f"add (infer=true) request latency over HTTP: {fmt_ms(percentiles(timings))} over {len(timings)}"
    )


if __name__ == "__main__":
    main()
