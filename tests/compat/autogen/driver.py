"""AutoGen's Mem0 memory (autogen-ext[mem0], Mem0Memory in cloud mode) against a live engram.

Run with this folder's environment's Python, ENGRAM_HOST, ENGRAM_API_KEY and ENGRAM_RUN set; prints
one JSON document on stdout (see tests/compat/README.md). Everything else goes to stderr.

How it is pointed at engram: Mem0Memory(is_cloud=True) builds `MemoryClient(api_key=...)` itself,
with no host parameter and no environment variable for the host, and that constructor already
calls GET /v1/ping/ on https://api.mem0.ai. So the driver lets it build a MemoryClient subclass
that fills in engram's host, while the Mem0Memory is constructed:

    with mock.patch.object(autogen_ext.memory.mem0._mem0, "MemoryClient", EngramMemoryClient):
        memory = Mem0Memory(user_id=..., api_key=...)

The same subclass carries the one other shim a user of autogen-ext 0.7.5 needs with the mem0ai
its range resolves to (2.x): Mem0Memory.query() calls `search(query, user_id=..., limit=...)`,
which mem0ai 2.x rejects before sending anything ("Top-level entity parameters {'user_id'} are
not supported in search()"; Mem0Memory logs it and answers no results). The subclass moves
user_id into `filters`, as mem0ai 2.x asks. Nothing else is changed: add() and clear() send
what the integration sends.
"""

import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from unittest import mock

os.environ["MEM0_TELEMETRY"] = "False"
os.environ["MEM0_DIR"] = tempfile.mkdtemp(prefix="mem0-autogen-")

HOST = os.environ["ENGRAM_HOST"].rstrip("/")
API_KEY = os.environ["ENGRAM_API_KEY"]
RUN = os.environ["ENGRAM_RUN"]
USERS = {"alice": f"{RUN}-alice", "bob": f"{RUN}-bob"}
SEARCH_WAIT_S = 30.0

logging.basicConfig(stream=sys.stderr, level=logging.WARNING)

# The real stdout is kept for the one JSON document; library chatter goes to stderr.
_stdout = sys.stdout
sys.stdout = sys.stderr

import autogen_ext.memory.mem0._mem0 as autogen_mem0  # noqa: E402
import httpx  # noqa: E402
from autogen_core.memory import MemoryContent  # noqa: E402
from autogen_ext.memory.mem0 import Mem0Memory  # noqa: E402
from mem0 import MemoryClient  # noqa: E402

try:
    from importlib.metadata import version as _version

    INTEGRATION_VERSION = _version("autogen-ext")
    MEM0_VERSION = _version("mem0ai")
except Exception:  # pragma: no cover
    INTEGRATION_VERSION = MEM0_VERSION = "unknown"

# --- HTTP trace (every request the integration makes, logged to stderr) -----------------------

TRACE = []
_STDERR = sys.__stderr__  # Mem0Memory redirects sys.stderr to a StringIO around add and search


def _on_response(response: httpx.Response) -> None:
    response.read()
    request = response.request
    try:
        req_body = json.loads(request.content) if request.content else None
    except Exception:
        req_body = request.content.decode("utf-8", "replace")
    try:
        resp_body = response.json()
    except Exception:
        resp_body = response.text
    entry = {
        "method": request.method,
        "url": str(request.url),
        "request": req_body,
        "status": response.status_code,
        "response": resp_body,
    }
    TRACE.append(entry)
    print("HTTP " + json.dumps(entry, default=str), file=_STDERR, flush=True)


def _last(method: str, path_part: str):
    for entry in reversed(TRACE):
        if entry["method"] == method and path_part in entry["url"]:
            return {"status": entry["status"], "response": entry["response"]}
    return None


# --- the workaround: a MemoryClient that talks to engram ---------------------------------------


class EngramMemoryClient(MemoryClient):
    """MemoryClient pointed at engram (Mem0Memory gives it only api_key)."""

    def __init__(self, api_key=None, host=None, client=None):
        client = client or httpx.Client(timeout=300, event_hooks={"response": [_on_response]})
        super().__init__(api_key=api_key, host=host or HOST, client=client)

    def search(self, query, options=None, **kwargs):
        # autogen-ext 0.7.5 passes user_id=..., which mem0ai 2.x only takes inside filters.
        entity = {
            k: kwargs.pop(k) for k in ("user_id", "agent_id", "app_id", "run_id") if k in kwargs
        }
        if entity:
            kwargs["filters"] = {**entity, **(kwargs.get("filters") or {})}
        return super().search(query, options, **kwargs)


def make_memory(user_id: str) -> Mem0Memory:
    with mock.patch.object(autogen_mem0, "MemoryClient", EngramMemoryClient):
        return Mem0Memory(user_id=user_id, api_key=API_KEY, is_cloud=True)


# --- errors that Mem0Memory.query() logs and swallows -------------------------------------------


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


SWALLOWED = _Collect()
logging.getLogger(autogen_mem0.__name__).addHandler(SWALLOWED)


# --- steps ---------------------------------------------------------------------------------------

steps = {}
skipped = {
    "list_alice": "Mem0Memory has no list call: autogen's Memory interface is add, query, "
    "update_context, clear and close (query needs a non-empty query text)",
    "list_alice_after_delete": "Mem0Memory has no list call (see list_alice); delete_alice "
    "reports what query() finds after clear()",
}


async def step(name, coro_fn):
    try:
        result = await coro_fn()
        steps[name] = {"ok": True, "result": result, "error": None}
    except Exception as e:
        steps[name] = {"ok": False, "result": None, "error": f"{type(e).__name__}: {e}"}


async def search(memory: Mem0Memory, text: str):
    deadline = time.monotonic() + SEARCH_WAIT_S
    while True:
        SWALLOWED.messages.clear()
        found = await memory.query(text)
        texts = [str(m.content) for m in found.results]
        if texts:
            return texts
        if time.monotonic() >= deadline:
            if SWALLOWED.messages:
                raise RuntimeError("Mem0Memory.query swallowed: " + SWALLOWED.messages[-1])
            return texts
        await asyncio.sleep(1.0)


async def main():
    alice = bob = None

    async def build_and_add(who, text):
        nonlocal alice, bob
        memory = make_memory(USERS[who])
        if who == "alice":
            alice = memory
        else:
            bob = memory
        returned = await memory.add(MemoryContent(content=text, mime_type="text/plain"))
        return {"returned": returned, "engram": _last("POST", "/memories/add/")}

    await step("add_alice", lambda: build_and_add("alice", "I am allergic to peanuts."))
    await step("add_bob", lambda: build_and_add("bob", "I live in Lisbon and I play the cello."))

    async def need(memory, who):
        if memory is None:
            raise RuntimeError(f"no Mem0Memory for {who} (add_{who} failed)")
        return memory

    async def search_alice():
        return await search(await need(alice, "alice"), "What food should I avoid?")

    async def search_bob():
        return await search(await need(bob, "bob"), "Where do I live?")

    await step("search_alice", search_alice)
    await step("search_bob", search_bob)

    async def delete_alice():
        memory = await need(alice, "alice")
        returned = await memory.clear()
        engram = _last("DELETE", "/v1/memories/")
        after = await memory.query("What food should I avoid?")
        return {
            "returned": returned,
            "engram": engram,
            "query_after_clear": [str(m.content) for m in after.results],
        }

    await step("delete_alice", delete_alice)


with contextlib.redirect_stdout(sys.stderr):
    asyncio.run(main())

document = {
    "framework": "autogen",
    "version": INTEGRATION_VERSION,
    "mem0ai": MEM0_VERSION,
    "users": USERS,
    "steps": steps,
    "skipped": skipped,
}
_stdout.write(json.dumps(document, indent=2, default=str) + "\n")
_stdout.flush()
