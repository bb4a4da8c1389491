"""The most expensive request each endpoint accepts, timed, with the server's memory around it.

Against a running server (`make run`, with its worker): it reads the limits the server runs
with from the same settings (ENGRAM_MAX_EMBED_TOKENS, ENGRAM_MAX_TEXT_CHARS, the filter caps,
ENGRAM_MAX_FACTS_PER_EVENT, …), builds a scope of long memories, then sends each worst case
--repeat times and prints its status, its slowest and median time, p50/p95/p99, and the growth
of the largest resident set of the server's processes (gunicorn workers, dramatiq workers)
during it. At the end it prints every process's resident memory at start-up and after the run,
and the run summary (common.RunSummary): each case's requests per second (over the time its
requests took, one at a time) and the peak RSS of the client, web server, worker and postgres.

    .venv/bin/python bench/worst_case.py [--repeat 3]

Resident sizes are read from /proc, so run it on the server's machine. The peak of each
request is each process's VmHWM, reset before the request (/proc/PID/clear_refs, as root).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from common import RunSummary, default_host, default_key, fmt_ms, load_local_env, percentiles

# 300 one-token words: a message that fills the model's 256-token window.
WINDOW = "word " * 300


@dataclass
class Case:
    name: str
    method: str
    path: str
    body: Callable[[], Any] | None = None
    expect: int = 200
    # The request only queues work: its cost is the worker's, until the event is done.
    waits_for_event: bool = False


def server_processes() -> dict[int, str]:
    """pid -> role of the processes serving engram on this machine (by their command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "gunicorn" in cmdline and "config/gunicorn_conf.py" in cmdline:
            found[int(entry.name)] = "gunicorn"
        elif "config.worker" in cmdline and "dramatiq" in cmdline:
            found[int(entry.name)] = "dramatiq"
    return found


def memory_kb(pid: int, field: str) -> int:
    """VmRSS or VmHWM of `pid`, in kB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def reset_peaks(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to VmRSS


def settings() -> Any:
    load_local_env()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    import logging

    from django.conf import settings as django_settings

    logging.getLogger("httpx").setLevel(logging.WARNING)

    return django_settings


def cases(limits: Any, user: str, memory_ids: list[str], backtracking: str) -> list[Case]:
    tokens, text_chars = limits.ENGRAM_MAX_EMBED_TOKENS, limits.ENGRAM_MAX_TEXT_CHARS
    full_texts = tokens // 256  # messages that fill the window, within the embedding budget
    long_text = varied_text(text_chars)
    operand_chars = limits.ENGRAM_MAX_FILTER_OPERAND_CHARS
    conditions = limits.ENGRAM_MAX_FILTER_TEXT_CONDITIONS
    keyword = ("zq" * operand_chars)[: max(1, operand_chars // conditions)]
    worst_filters = {
        "AND": [
            {"user_id": user},
            *({"keywords": {"icontains": keyword}} for _ in range(conditions)),
        ]
    }

    # Over memories of one repeated letter, an operand of that letter ending in another makes
    # LIKE try every position of the text and fail late; NOT makes every row be tested.
    near_miss = [
        ("a" * operand_chars)[: operand_chars // conditions - 2] + f"b{n}"
        for n in range(conditions)
    ]
    backtracking_or = {
        "AND": [
            {"user_id": backtracking},
            {"OR": [{"keywords": {"icontains": k}} for k in near_miss]},
        ]
    }
    backtracking_not = {
        "AND": [
            {"user_id": backtracking},
            *({"NOT": {"keywords": {"icontains": k}}} for k in near_miss),
        ]
    }

    def raw_add(texts: list[str]) -> dict[str, Any]:
        return {
            "messages": [{"role": "user", "content": t} for t in texts],
            "user_id": user,
            "infer": False,
        }

    def unique(text: str, count: int) -> list[str]:
        return [f"{n} {text}"[: len(text)] for n in range(count)]

    batch_n = min(1000, len(memory_ids))
    return [
        Case(
            "search: the most text-matching filters accepted, over long memories",
            "POST",
            "/v2/memories/search/",
            lambda: {"query": "what does the user keep?", "filters": worst_filters, "top_k": 100},
        ),
        Case(
            "search: an OR of the most near-miss matches, over memories of one letter",
            "POST",
            "/v2/memories/search/",
            lambda: {"query": "a", "filters": backtracking_or, "top_k": 100},
        ),
        Case(
            "search: an AND of the most near-miss NOT matches, over memories of one letter",
            "POST",
            "/v2/memories/search/",
            lambda: {"query": "a", "filters": backtracking_not, "top_k": 100},
        ),
        Case(
            "list (POST /v3/memories/): the same AND of NOT matches",
            "POST",
            "/v3/memories/",
            lambda: {"filters": backtracking_not, "page_size": 100},
        ),
        Case(
            "search: the same, one operand character over the limit (refused)",
            "POST",
            "/v2/memories/search/",
            lambda: {
                "query": "x",
                "filters": {
                    "AND": [
                        {"user_id": user},
                        {"keywords": {"icontains": "z" * (operand_chars + 1)}},
                    ]
                },
            },
            expect=400,
        ),
        Case(
            f"add infer=false: {full_texts} messages of {text_chars} characters (the budget)",
            "POST",
            "/v1/memories/",
            lambda: raw_add(unique(long_text, full_texts)),
        ),
        Case(
            f"add infer=false: {full_texts + 1} such messages (refused)",
            "POST",
            "/v1/memories/",
            lambda: raw_add(unique(long_text, full_texts + 1)),
            expect=400,
        ),
        Case(
            "add infer=false: 500 messages of 3,900 characters (~2 MB, refused)",
            "POST",
            "/v1/memories/",
            lambda: raw_add(unique(long_text[:3900], 500)),
            expect=400,
        ),
        Case(
            f"PUT /v1/batch/: {full_texts} texts re-embedded (the budget)",
            "PUT",
            "/v1/batch/",
            lambda: {
                "memories": [
                    {"memory_id": i, "text": f"{i} {WINDOW}"} for i in memory_ids[:full_texts]
                ]
            },
        ),
        Case(
            f"PUT /v1/batch/: {batch_n} metadata changes (no embedding)",
            "PUT",
            "/v1/batch/",
            lambda: {
                "memories": [
                    {"memory_id": i, "metadata": {"n": uuid.uuid4().hex}}
                    for i in memory_ids[:batch_n]
                ]
            },
        ),
        Case(
            f"GET /v1/memories/: {user}'s memories, 200 a page",
            "GET",
            f"/v1/memories/?user_id={user}&page=1&page_size=200",
        ),
        Case(
            f"add infer=true: one message of {text_chars} characters (the worker's time)",
            "POST",
            "/v1/memories/",
            lambda: {
                "messages": [{"role": "user", "content": long_text}],
                "user_id": f"{user}-infer",
            },
            waits_for_event=True,
        ),
    ]


def wait_for_event(http: httpx.Client, answer: Any) -> str:
    event_id = (answer[0] if isinstance(answer, list) else answer)["event_id"]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        status = http.get(f"/v1/event/{event_id}/").json()["status"]
        if status not in ("PENDING", "RUNNING"):
            return str(status)
        time.sleep(0.1)
    return "TIMEOUT"


def run_case(http: httpx.Client, case: Case, repeat: int, summary: RunSummary) -> None:
    times, grown, statuses = [], [], set()
    for _ in range(repeat):
        processes = server_processes()
        before = {pid: memory_kb(pid, "VmRSS") for pid in processes}
        reset_peaks(list(processes))
        body = case.body() if case.body else None
        started = time.perf_counter()
        response = http.request(case.method, case.path, json=body)
        status = str(response.status_code)
        if case.waits_for_event and response.status_code == 200:
            status += " " + wait_for_event(http, response.json())
        times.append(time.perf_counter() - started)
        statuses.add(status)
        grown.append(max((memory_kb(pid, "VmHWM") - before[pid] for pid in processes), default=0))
    flag = "" if statuses == {str(case.expect)} or case.waits_for_event else "  UNEXPECTED"
    summary.add(case.name, len(times), sum(times), "requests")
    print(
        f"{case.name}\n    status {'/'.join(sorted(statuses))}{flag}   "
        f"max {max(times):.2f} s   median {statistics.median(times):.2f} s   "
        f"peak RSS growth {max(grown) / 1024:.0f} MB\n"
        f"    {fmt_ms(percentiles([t * 1000 for t in times]))}"
    )


def varied_text(chars: int, seed: int = 0) -> str:
    """`chars` characters of distinct first-person sentences (each a fact to extract)."""
    sentences: list[str] = []
    n = seed * 100_000
    while sum(map(len, sentences)) < chars:
        sentences.append(f"I visited town number {n} with my cousin number {n * 7 % 1000}. ")
        n += 1
    return "".join(sentences)[:chars]


def warm_up(http: httpx.Client, user: str) -> None:
    """One of each kind of work, so every process has loaded its model before the baseline."""
    body = {"messages": [{"role": "user", "content": "I like tea."}], "user_id": user}
    wait_for_event(http, http.post("/v1/memories/", json=body).json())
    http.post("/v1/memories/", json={**body, "infer": False})
    http.post("/v2/memories/search/", json={"query": "tea", "filters": {"user_id": user}})
    time.sleep(2)  # the entity-linking job the adds queued


def setup_scope(http: httpx.Client, limits: Any, user: str) -> list[str]:
    """A scope of long memories (each at ENGRAM_MAX_TEXT_CHARS), 20 of them, plus short ones
    up to 1,000 for the batch cases."""
    text_chars = limits.ENGRAM_MAX_TEXT_CHARS
    ids: list[str] = []
    for n in range(20):
        text = varied_text(text_chars, seed=n + 1)
        body = {"messages": [{"role": "user", "content": text}], "user_id": user, "infer": False}
        ids += [r["id"] for r in http.post("/v1/memories/", json=body).json()["results"]]
    for n in range(20):
        body = {
            "messages": [{"role": "user", "content": "a" * (text_chars - 2) + f"{n:02d}"}],
            "user_id": f"{user}-aaa",
            "infer": False,
        }
        http.post("/v1/memories/", json=body).raise_for_status()
    for start in range(0, 980, 98):
        messages = [
            {"role": "user", "content": f"Short fact number {start + n}."} for n in range(98)
        ]
        body = {"messages": messages, "user_id": user, "infer": False}
        ids += [r["id"] for r in http.post("/v1/memories/", json=body).json()["results"]]
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=default_host())
    parser.add_argument("--key", default=default_key())
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    limits = settings()
    summary = RunSummary.start(args.host)
    http = httpx.Client(
        base_url=args.host, headers={"Authorization": f"Token {args.key}"}, timeout=600
    )
    user = f"worst-{uuid.uuid4().hex[:8]}"
    warm_up(http, user)
    start_rss = {pid: (role, memory_kb(pid, "VmRSS")) for pid, role in server_processes().items()}
    print(f"engram at {args.host}; scope {user}; --repeat {args.repeat}")
    print(
        f"limits: ENGRAM_MAX_EMBED_TOKENS={limits.ENGRAM_MAX_EMBED_TOKENS} "
        f"ENGRAM_MAX_TEXT_CHARS={limits.ENGRAM_MAX_TEXT_CHARS} "
        f"ENGRAM_MAX_FILTER_OPERAND_CHARS={limits.ENGRAM_MAX_FILTER_OPERAND_CHARS} "
        f"ENGRAM_MAX_FILTER_TEXT_CONDITIONS={limits.ENGRAM_MAX_FILTER_TEXT_CONDITIONS} "
        f"ENGRAM_MAX_FACTS_PER_EVENT={limits.ENGRAM_MAX_FACTS_PER_EVENT}"
    )
    memory_ids = setup_scope(http, limits, user)
    print(
        f"scopes: {len(memory_ids)} memories (20 of {limits.ENGRAM_MAX_TEXT_CHARS} characters), "
        f"and 20 of {limits.ENGRAM_MAX_TEXT_CHARS} times one letter\n"
    )
    for case in cases(limits, user, memory_ids, f"{user}-aaa"):
        run_case(http, case, args.repeat, summary)
    for scope in (user, f"{user}-aaa", f"{user}-infer"):
        http.delete(f"/v1/memories/?user_id={scope}")
    time.sleep(5)  # let the worker finish what the run queued (entity links)
    print("\nresident memory, after a warm-up request of each kind -> end of the run:")
    for pid, (role, kb) in sorted(start_rss.items()):
        now = memory_kb(pid, "VmRSS")
        change = f"{(now - kb) / kb:+.0%}" if kb and now else "gone (recycled)"
        print(f"    {role:9} pid {pid:7}  {kb / 1024:6.0f} MB -> {now / 1024:6.0f} MB  {change}")
    summary.report()


if __name__ == "__main__":
    main()
