"""Extraction figures: the add request on the queue path, and the pipeline's own overhead.

1. `add` (infer=true) request latency through HTTP against a running server (`make run`):
   validate, write the event, send on commit, answer PENDING.
2. Pipeline throughput of one worker process with a fake Claude answering after a fixed delay
   (a local Messages API, as in the tests): events/s, and engram's own time per event with the
   model's time taken out, graph extraction included (one entity and one relation per turn,
   written to the AGE graph).
3. A real conversation (LoCoMo), one add request per exchange, through the pipeline and the
   summary refresh: model calls and estimated input tokens per request, by call, from what the
   API would be sent (system prompt, tool schema, messages).
Each timed operation has p50/p95/p99; at the end the run summary (common.RunSummary): requests
and events per second of each part, and the peak RSS of the client, web server, worker and
postgres.

    .venv/bin/python bench/extraction.py [--requests 500] [--events 200] [--model-delay-ms 50]
                                         [--conversation-turns 120]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")

from common import ROOT, Api, RunSummary, default_host, fmt_ms, load_local_env, percentiles

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


def measure_pipeline(events: int, delay_ms: int, rng: random.Random, summary: RunSummary) -> None:
    import django

    django.setup()
    from memory.extraction.llm.claude import ClaudeExtractor
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
            # Asked only when a stored memory is near the fact: any decide call may take it.
            Reply(respond=add_every_candidate, delay=delay_ms / 1000, tool="record_decisions"),
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
    timings = []
    with summary.phase(f"pipeline, 1 process, fake model {delay_ms} ms", "events") as rate:
        for event_id in ids:
            started = time.perf_counter()
            process_event(event_id, project.pk, claude)
            timings.append((time.perf_counter() - started) * 1000)
        rate.count = len(ids)
    elapsed = rate.seconds
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
    print(f"model calls per turn: {calls / events:.2f} (the fake reports {tokens / events:.0f} "
          "tokens of usage per turn: scripted, not measured)")  # fmt: skip
    print(f"pipeline time per event (model time included): {fmt_ms(percentiles(timings))}")
    server.shutdown()


# Anthropic's documented system prompt for tool use with tool_choice "tool" (Claude 4 models).
TOOL_USE_OVERHEAD_TOKENS = 313


def request_tokens(body: dict[str, Any]) -> float:
    """An estimate of a Messages API request's input tokens: its JSON (system, tools, messages)
    at about 4 characters a token, plus the tool-use system prompt."""
    sent = {k: body.get(k) for k in ("system", "tools", "messages")}
    return len(json.dumps(sent, ensure_ascii=False)) / 4 + TOOL_USE_OVERHEAD_TOKENS


def measure_conversation(turns: int, delay_ms: int, summary: RunSummary) -> None:
    """A real conversation (the first LoCoMo dev conversation), one add request per exchange
    (one speaker as the user, the other as the assistant), through the pipeline and the summary
    refresh as a worker runs them, against the fake model: calls and estimated input tokens per
    request, by call, from what the API would be sent (system, tool schema, messages)."""
    import django

    django.setup()
    from django.conf import settings

    from memory.extraction.llm.claude import ClaudeExtractor
    from memory.extraction.pipeline import process_event, refresh_summary
    from memory.models import MemoryEvent
    from tenants.actions import do_create_api_key
    from tenants.db import project_context
    from tests.fake_anthropic import FakeClaude, Reply, _handler

    data = json.loads((ROOT.parent / "shared" / "data" / "locomo-dev.json").read_text())
    conversation = data[0]["conversation"]
    user, other = conversation["speaker_a"], conversation["speaker_b"]
    dialog = [t for n in range(1, 40) for t in conversation.get(f"session_{n}", [])][:turns]
    fake = FakeClaude()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    # Replies for one tool first: the untargeted one (facts) would answer any call.
    fake.script(
        Reply(respond=running_summary, delay=delay_ms / 1000, tool="record_summary", repeat=True),
        Reply(respond=add_every_candidate, delay=delay_ms / 1000, tool="record_decisions",
              repeat=True),
        Reply(respond=fact_per_user_message, delay=delay_ms / 1000, repeat=True),
    )  # fmt: skip
    claude = ClaudeExtractor(api_key="bench", base_url=fake.url, model="claude-haiku-5-5",
                             max_tokens=settings.ENGRAM_LLM_MAX_TOKENS, timeout=30,
                             max_retries=0)  # fmt: skip
    project = do_create_api_key(
        org_name="bench", project_name=f"conversation-{uuid.uuid4().hex[:6]}"
    ).key.project
    scope = {"user_id": user.lower(), "agent_id": None, "app_id": None, "run_id": None}
    requests = 0
    timings = []
    with summary.phase("conversation: pipeline + summary refresh", "requests") as rate:
        for start in range(0, len(dialog), 2):
            messages = [
                {"role": "user" if t["speaker"] == user else "assistant", "content": t["text"],
                 "name": t["speaker"]}
                for t in dialog[start : start + 2]
            ]  # fmt: skip
            started = time.perf_counter()
            with project_context(project.pk):
                event = MemoryEvent.objects.create(
                    project=project, payload={"messages": messages, "scope": scope}, **scope
                )
            process_event(event.id, project.pk, claude)
            refresh_summary(event.id, project.pk, claude)  # what the worker runs after each one
            timings.append((time.perf_counter() - started) * 1000)
            requests += 1
        rate.count = requests
    by_tool: dict[str, list[float]] = {}
    for r in fake.requests:
        by_tool.setdefault(r["body"]["tool_choice"]["name"], []).append(request_tokens(r["body"]))
    total = sum(sum(v) for v in by_tool.values())
    print(
        f"conversation ({len(dialog)} turns of {user} and {other}, {requests} add requests, "
        f"ENGRAM_SUMMARY_EVERY={settings.ENGRAM_SUMMARY_EVERY}): "
        f"{len(fake.requests) / requests:.2f} model calls per request, about "
        f"{total / requests:,.0f} input tokens per request (estimated from what the API is sent: "
        "system, tool schema, messages, at 4 characters a token, plus the tool-use prompt)"
    )
    for tool, sizes in sorted(by_tool.items()):
        print(f"  {tool}: {len(sizes) / requests:.2f} calls per request, "
              f"{sum(sizes) / len(sizes):,.0f} tokens per call")  # fmt: skip
    print(
        f"  time per request (fake model answering in {delay_ms} ms): {fmt_ms(percentiles(timings))}"
    )
    server.shutdown()


def fact_per_user_message(body: dict[str, Any]) -> dict[str, Any]:
    """A fake extraction: one fact per user message of the request."""
    block = body["messages"][0]["content"].split("<messages>")[-1].split("</messages>")[0]
    facts = [
        {"text": f"User said: {line.split(': ', 1)[1]}", "positions": [int(line[1:].split("]")[0])]}
        for line in block.strip().splitlines()
        if line.startswith("[") and "] user" in line
    ]
    return {"facts": facts}


def running_summary(body: dict[str, Any]) -> dict[str, Any]:
    """A fake summary about as long as a real one (about 200 words)."""
    return {"summary": " ".join(["The user talked about their week and their plans."] * 22)}


def add_every_candidate(body: dict[str, Any]) -> dict[str, Any]:
    prompt = body["messages"][0]["content"]
    found = re.findall(r"^Candidate (\d+): (.*)$", prompt, re.MULTILINE)
    return {"decisions": [{"fact": int(n), "event": "ADD", "text": t} for n, t in found]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--model-delay-ms", type=int, default=50)
    parser.add_argument(
        "--conversation-turns", type=int, default=120, help="LoCoMo turns for the token figures"
    )
    parser.add_argument("--host", default=default_host())
    args = parser.parse_args()
    rng = random.Random(7)
    print(f"command: {' '.join(sys.argv)}")
    summary = RunSummary.start(args.host if args.requests else None)
    if args.events:
        measure_pipeline(args.events, args.model_delay_ms, rng, summary)
    if args.conversation_turns:
        measure_conversation(args.conversation_turns, args.model_delay_ms, summary)
    if args.requests:
        from tenants.actions import do_create_api_key

        key = do_create_api_key(org_name="bench", project_name="extraction-http").raw
        api = Api(args.host, key)
        with summary.phase("add (infer=true) over HTTP", "requests") as rate:
            timings = measure_requests(api, args.requests, rng)
            rate.count = len(timings)
        print(
            f"add (infer=true) request latency over HTTP: {fmt_ms(percentiles(timings))} over {len(timings)}"
        )
    summary.report()


if __name__ == "__main__":
    main()
