"""Drive Haystack's Mem0 integration (mem0-haystack) against a live engram.

Uses the integration's public store, `Mem0MemoryStore` (add_memories / search_memories), as a
Haystack user would. The store builds `MemoryClient(api_key=...)` for the Mem0 cloud and has no
host parameter, so the one workaround is a subclass whose `warm_up()` (the store's documented
hook that creates the client) builds `MemoryClient(host=ENGRAM_HOST, api_key=...)`.

Prints one JSON document on stdout (see tests/compat/README.md); everything else goes to stderr.
Set ENGRAM_TRACE=1 to log every HTTP request and response to stderr.
"""

import contextlib
import json
import os
import sys
import tempfile
import time
import traceback

# Before importing mem0 / haystack: no telemetry, no writes to ~/.mem0.
os.environ["MEM0_TELEMETRY"] = "False"
os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"
os.environ["MEM0_DIR"] = tempfile.mkdtemp(prefix="mem0-haystack-")

HOST = os.environ["ENGRAM_HOST"]
API_KEY = os.environ["ENGRAM_API_KEY"]
RUN = os.environ["ENGRAM_RUN"]
TRACE = bool(os.environ.get("ENGRAM_TRACE"))

ALICE = f"{RUN}-alice"
BOB = f"{RUN}-bob"


def _log(*args):
    print(*args, file=sys.stderr, flush=True)


def _trace_request(request):
    _log(f">>> {request.method} {request.url}\n    {request.content.decode(errors='replace')}")


def _trace_response(response):
    response.read()
    _log(
        f"<<< {response.status_code} {response.request.method} {response.request.url.path}\n"
        f"    {response.text[:2000]}"
    )


def main():
    out = {
        "framework": "haystack",
        "version": None,
        "users": {"alice": ALICE, "bob": BOB},
        "steps": {},
        "skipped": {},
    }

    # Library chatter (warnings, logging, prints) goes to stderr; only the JSON goes to stdout.
    with contextlib.redirect_stdout(sys.stderr):
        import importlib.metadata

        import httpx
        from haystack.dataclasses import ChatMessage
        from haystack.utils import Secret
        from haystack_integrations.memory_stores.mem0 import Mem0MemoryStore
        from mem0 import MemoryClient

        out["version"] = importlib.metadata.version("mem0-haystack")

        class EngramMem0MemoryStore(Mem0MemoryStore):
            """Mem0MemoryStore whose client talks to engram instead of https://api.mem0.ai."""

            def warm_up(self) -> None:
                if self._client is None:
                    http = None
                    if TRACE:
                        http = httpx.Client(
                            timeout=300,
                            event_hooks={
                                "request": [_trace_request],
                                "response": [_trace_response],
                            },
                        )
                    self._client = MemoryClient(
                        api_key=self.api_key.resolve_value(), host=HOST, client=http
                    )

        store = EngramMem0MemoryStore(api_key=Secret.from_token(API_KEY))

        def step(name, fn):
            try:
                out["steps"][name] = {"ok": True, "result": fn(), "error": None}
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                cause = (
                    f" (caused by {type(e.__cause__).__name__}: {e.__cause__})"
                    if e.__cause__
                    else ""
                )
                out["steps"][name] = {
                    "ok": False,
                    "result": None,
                    "error": f"{type(e).__name__}: {e}{cause}",
                }

        def add(user, text):
            # mem0ai 2.x: the add is queued ({"event_id", "status": "PENDING"}, no "results"),
            # so the store returns an empty list; the worker extracts the memory afterwards.
            return store.add_memories(messages=[ChatMessage.from_user(text)], user_id=user)

        def search(user, query):
            deadline = time.monotonic() + 30
            while True:
                texts = [m.text for m in store.search_memories(query=query, user_id=user)]
                if texts or time.monotonic() >= deadline:
                    return texts
                time.sleep(1)

        def list_all(user):
            # search_memories without a query calls MemoryClient.get_all(filters={"user_id": ...}).
            return [m.text for m in store.search_memories(query=None, user_id=user)]

        step("add_alice", lambda: add(ALICE, "I am allergic to peanuts."))
        step("add_bob", lambda: add(BOB, "I live in Lisbon and I play the cello."))
        step("search_alice", lambda: search(ALICE, "What food should I avoid?"))
        step("search_bob", lambda: search(BOB, "Where do I live?"))
        step("list_alice", lambda: list_all(ALICE))

        reason = (
            "mem0-haystack 1.0.0 has no delete: Mem0MemoryStore offers only add_memories and "
            "search_memories (Mem0MemoryWriter/Retriever and the two Tools wrap those), so "
            "deleting needs the raw mem0ai client, not the integration"
        )
        out["skipped"]["delete_alice"] = reason
        out["skipped"]["list_alice_after_delete"] = reason

    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
