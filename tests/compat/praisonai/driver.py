"""PraisonAI agents' Mem0 memory (praisonaiagents 1.7.17, Memory with provider "mem0") against a
live engram.

Run with the folder's environment's Python, with ENGRAM_HOST, ENGRAM_API_KEY and ENGRAM_RUN set.
Prints one JSON document on stdout (see ../README.md); everything else goes to stderr.

praisonaiagents.memory.Memory(config={"provider": "mem0", "config": {"api_key": ...}}) gets its
backend from the memory adapter registry; the "mem0" factory builds Mem0MemoryAdapter, whose
__init__ calls `mem0.MemoryClient(api_key=...)` with no host, i.e. the cloud (and the client's
constructor pings it). PraisonAI reads no host from its config or the environment, and neither
does mem0ai. The workaround is PraisonAI's own extension point: register, under "mem0", a factory
for a Mem0MemoryAdapter subclass that only builds its client differently:

    class EngramMem0Adapter(Mem0MemoryAdapter):
        def __init__(self, mem0_config):
            key = mem0_config["config"]["api_key"]
            self.mem0_client = MemoryClient(host=ENGRAM_HOST, api_key=key)
            self.graph_enabled = False

    register_memory_factory("mem0", lambda **kw: EngramMem0Adapter(mem0_config=kw))

Everything else (what Memory sends and how it reads the answers) is PraisonAI's own code. The
user-memory methods are driven directly; no Agent, no LLM.

PraisonAI 1.7.17 was written against the mem0ai 0.1.x client: search_user_memory() calls
`client.search(query=..., limit=..., user_id=..., rerank=...)` and get_all_memories() calls
`client.get_all()` with no filter. Its "mem0ai>=0.1.0" range resolves to mem0ai 2.x, whose client
rejects a top-level user_id in search() with a ValueError before sending anything, and whose
get_all() answers a paginated dict that Memory.get_all_memories() cannot iterate. The driver
calls PraisonAI's user-memory method first; when that fails this way it uses the method of
Memory / of its adapter that passes keyword arguments through to the client, with mem0ai 2.x's
`filters={"user_id": ...}`, and says so under "notes".
"""

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

# Keep the real stdout for the one JSON document; library chatter goes to stderr, at the
# file-descriptor level too.
_json_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr

_tmp = tempfile.mkdtemp(prefix="engram-compat-praisonai-")
# PraisonAI keeps data under ~/.praisonai (or $PRAISONAI_HOME) and, for Memory, in
# <cwd>/.praisonai/{short,long}_term.db: give it a throw-away home and working directory.
os.environ["HOME"] = os.path.join(_tmp, "home")
os.makedirs(os.environ["HOME"])
os.environ["PRAISONAI_HOME"] = os.path.join(_tmp, "praisonai")
os.environ["XDG_DATA_HOME"] = os.path.join(_tmp, "data")
os.environ["XDG_CONFIG_HOME"] = os.path.join(_tmp, "config")
os.environ["XDG_STATE_HOME"] = os.path.join(_tmp, "state")
os.environ["XDG_CACHE_HOME"] = os.path.join(_tmp, "cache")
os.environ["PRAISONAI_TELEMETRY_DISABLED"] = "true"
os.environ["PRAISONAI_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "true"
os.environ["OTEL_SDK_DISABLED"] = "true"
os.environ["MEM0_TELEMETRY"] = "False"
os.environ["MEM0_DIR"] = os.path.join(_tmp, "mem0")  # never ~/.mem0
os.environ.pop("MEM0_API_KEY", None)
_workdir = os.path.join(_tmp, "work")
os.makedirs(_workdir)
os.chdir(_workdir)

HOST = os.environ["ENGRAM_HOST"].rstrip("/")
API_KEY = os.environ["ENGRAM_API_KEY"]
RUN = os.environ["ENGRAM_RUN"]
USERS = {"alice": f"{RUN}-alice", "bob": f"{RUN}-bob"}

SEARCH_TIMEOUT_S = 30.0
ENTITY_PARAMS_ERROR = "Top-level entity parameters"

doc = {
    "framework": "praisonai",
    "version": None,
    "users": USERS,
    "steps": {},
    "skipped": {},
    "notes": {},
}

# Every HTTP exchange the wrapped client makes, for stderr and for the steps' results.
http_log = []


def _on_request(request):
    body = request.content.decode("utf-8", "replace") if request.content else None
    with contextlib.suppress(ValueError):
        body = json.loads(body) if body else None
    http_log.append({"method": request.method, "url": str(request.url), "json": body})


def _on_response(response):
    response.read()
    try:
        body = response.json()
    except ValueError:
        body = response.text
    entry = http_log[-1] if http_log else {}
    entry["status"] = response.status_code
    entry["body"] = body
    print("HTTP", json.dumps(entry, default=str), file=sys.stderr)


def _exchanges(since, path):
    return [
        {k: e.get(k) for k in ("method", "url", "json", "status", "body")}
        for e in http_log[since:]
        if path in e["url"]
    ]


def step(name, fn):
    try:
        doc["steps"][name] = {"ok": True, "result": fn(), "error": None}
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        doc["steps"][name] = {"ok": False, "result": None, "error": f"{type(exc).__name__}: {exc}"}


def _records(answer):
    """The memory records in what Memory's search / list handed back (list, or mem0ai 2.x dict)."""
    if isinstance(answer, dict):
        answer = answer.get("results", answer.get("memories", []))
    return list(answer or [])


def _texts(records):
    return [r.get("memory") or r.get("text") or r.get("content") for r in records]


def main():
    from importlib.metadata import version

    doc["version"] = version("praisonaiagents")

    import httpx
    from mem0 import MemoryClient
    from praisonaiagents.memory import Memory
    from praisonaiagents.memory.adapters import register_memory_factory
    from praisonaiagents.memory.adapters.factories import Mem0MemoryAdapter

    class EngramMem0Adapter(Mem0MemoryAdapter):
        """PraisonAI's Mem0 adapter, with its MemoryClient pointed at engram, not the cloud."""

        def __init__(self, mem0_config):
            config = mem0_config.get("config", {})
            # Instrumentation only: record what PraisonAI sends and what engram answers.
            client = httpx.Client(
                timeout=300,
                event_hooks={"request": [_on_request], "response": [_on_response]},
            )
            self.mem0_client = MemoryClient(host=HOST, api_key=config["api_key"], client=client)
            self.graph_enabled = False

    register_memory_factory(
        "mem0",
        lambda **kw: EngramMem0Adapter(mem0_config=kw),  # noqa: PLW0108 (keywords in)
    )

    memory = Memory(
        config={
            "provider": "mem0",
            "config": {"api_key": API_KEY},
            # PraisonAI also opens local SQLite files for its legacy API; keep them in the temp dir.
            "short_db": os.path.join(_tmp, "short_term.db"),
            "long_db": os.path.join(_tmp, "long_term.db"),
        }
    )
    assert memory.use_mem0 and isinstance(memory.mem0_client, MemoryClient), memory.provider

    def add(who, text):
        def run():
            before = len(http_log)
            returned = memory.store_user_memory(USERS[who], text)
            adds = _exchanges(before, "/memories/add/") or _exchanges(before, "/memories/")
            last = adds[-1] if adds else {}
            return {
                "returned": returned,
                "sent": last.get("json"),
                "path": last.get("url"),
                "status": last.get("status"),
                "answer": last.get("body"),
            }

        return run

    def search_once(who, query):
        try:
            return memory.search_user_memory(USERS[who], query)
        except ValueError as exc:
            if ENTITY_PARAMS_ERROR not in str(exc):
                raise
            doc["notes"].setdefault(
                "search",
                "Memory.search_user_memory(user_id, query) raised, before sending anything: "
                f"ValueError: {exc} -- PraisonAI passes user_id top-level, which mem0ai 2.x's "
                "MemoryClient.search() rejects. Used instead: Memory.search(query, "
                "filters={'user_id': user_id}), which passes the filter through to the client.",
            )
            return memory.search(query, filters={"user_id": USERS[who]})

    def search(who, query):
        def run():
            deadline = time.monotonic() + SEARCH_TIMEOUT_S
            while True:
                texts = _texts(_records(search_once(who, query)))
                if texts or time.monotonic() >= deadline:
                    return texts
                time.sleep(1.0)

        return run

    def list_records(who):
        if "list" not in doc["notes"]:
            before = len(http_log)
            try:
                records = memory.get_all_memories()
                doc["notes"]["list"] = (
                    "Memory.get_all_memories() (no user filter) returned "
                    f"{len(records)} records; not used for a per-user list"
                )
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                doc["notes"]["list"] = {
                    "Memory.get_all_memories()": f"{type(exc).__name__}: {exc}",
                    # What it sent and how engram answered (the answer's records left out).
                    "sent": [
                        {
                            "method": e["method"],
                            "url": e["url"],
                            "json": e["json"],
                            "status": e["status"],
                            "answer_keys": sorted(e["body"])
                            if isinstance(e["body"], dict)
                            else None,
                            "answer_count": (e["body"] or {}).get("count")
                            if isinstance(e["body"], dict)
                            else None,
                        }
                        for e in _exchanges(before, "/memories/")
                    ],
                    "used instead": (
                        "memory.memory_adapter.get_all_memories(filters={'user_id': user_id}) "
                        "(Mem0MemoryAdapter.get_all_memories(**kwargs) -> client.get_all(**kwargs))"
                    ),
                }
        return _records(memory.memory_adapter.get_all_memories(filters={"user_id": USERS[who]}))

    def list_texts(who):
        return lambda: _texts(list_records(who))

    def delete(who):
        def run():
            records = list_records(who)
            if not records:
                raise RuntimeError(f"{who} has no memories to delete")
            before = len(http_log)
            outcome = {r["id"]: memory.delete_memory(r["id"]) for r in records}
            if not all(outcome.values()):
                raise RuntimeError(f"Memory.delete_memory() returned False: {outcome}")
            return {"deleted": outcome, "sent": _exchanges(before, "/memories/")}

        return run

    step("add_alice", add("alice", "I am allergic to peanuts."))
    step("add_bob", add("bob", "I live in Lisbon and I play the cello."))
    step("search_alice", search("alice", "What food should I avoid?"))
    step("search_bob", search("bob", "Where do I live?"))
    step("list_alice", list_texts("alice"))
    step("delete_alice", delete("alice"))
    step("list_alice_after_delete", list_texts("alice"))

    doc["notes"]["delete"] = (
        "Memory.delete_memory(memory_id) deletes one memory (client.delete(id)); PraisonAI has no "
        "per-user delete for mem0 (reset_user_memory() -> reset_long_term(), which the mem0 "
        "adapter does not support), so delete_alice deletes each of alice's listed memories by id"
    )


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # import or setup failure: still one JSON document
        traceback.print_exc(file=sys.stderr)
        doc["error"] = f"{type(exc).__name__}: {exc}"
    if not doc["skipped"]:
        del doc["skipped"]
    _json_out.write(json.dumps(doc, indent=2, default=str) + "\n")
    _json_out.flush()
    os.chdir("/")
    shutil.rmtree(_tmp, ignore_errors=True)
