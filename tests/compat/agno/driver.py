"""Drive Agno's Mem0 toolkit (agno.tools.mem0.Mem0Tools) against a live engram.

Run with this folder's environment's Python, with ENGRAM_HOST, ENGRAM_API_KEY and ENGRAM_RUN set
(see ../README.md). Prints one JSON document on stdout; anything else goes to stderr.

Mem0Tools(api_key=...) builds `MemoryClient(api_key=...)` itself, with no way to pass a host, so
the client would go to the cloud (and its constructor pings it). The workaround: point the name
`MemoryClient` in agno's module at a subclass whose host defaults to engram, before building the
toolkit. Everything else is Agno's own code: its tool functions are called directly, with a
minimal RunContext carrying the user id, as an Agent run would pass it; no LLM is involved.

Agno 3.1.10 calls `client.search(query=..., user_id=...)` and `client.get_all(user_id=...)`; every
mem0ai 2.x client (the one Agno's unpinned `mem0ai` extra resolves to) rejects a top-level
user_id there with a ValueError before sending anything, and Agno returns that message as the
tool's result. Such a step is reported under "skipped" with the message (no request reaches
engram); should a later version pass it, the step runs and is recorded as usual.

An infer=true add is processed by engram's worker after it answers PENDING. The searches, when
they run, wait for that; when they cannot, the driver waits for alice's add itself (through the
mem0ai client the toolkit wraps, `tools.client.get_all(filters=...)`, up to 30 s) before
deleting, so that delete_alice deletes a processed memory rather than racing the worker.
"""

import json
import os
import sys
import tempfile
import time
import uuid

os.environ["MEM0_TELEMETRY"] = "False"
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="engram-compat-agno-mem0-"))
os.environ["AGNO_TELEMETRY"] = "false"
os.environ.pop("MEM0_API_KEY", None)

# Library chatter (agno logs through rich, mem0 through logging) must not reach stdout.
_real_stdout = sys.stdout
sys.stdout = sys.stderr

from importlib.metadata import version  # noqa: E402

import agno.tools.mem0 as agno_mem0  # noqa: E402
import httpx  # noqa: E402
from agno.run import RunContext  # noqa: E402
from agno.tools.mem0 import Mem0Tools  # noqa: E402
from mem0 import MemoryClient  # noqa: E402

HOST = os.environ["ENGRAM_HOST"].rstrip("/")
API_KEY = os.environ["ENGRAM_API_KEY"]
RUN = os.environ["ENGRAM_RUN"]
TRACE = bool(os.environ.get("ENGRAM_TRACE"))

USERS = {"alice": f"{RUN}-alice", "bob": f"{RUN}-bob"}
SEARCH_TIMEOUT = 30.0
ENTITY_PARAMS_ERROR = "Top-level entity parameters"


def _log_request(request):
    if TRACE:
        body = request.content.decode("utf-8", "replace") if request.content else ""
        print(f">> {request.method} {request.url} {body}", file=sys.stderr)


def _log_response(response):
    if TRACE:
        response.read()
        print(f"<< {response.status_code} {response.text}", file=sys.stderr)


class EngramMemoryClient(MemoryClient):
    """mem0ai's MemoryClient, with engram as the default host."""

    def __init__(self, api_key=None, host=None, client=None):
        if client is None and TRACE:
            client = httpx.Client(
                timeout=300, event_hooks={"request": [_log_request], "response": [_log_response]}
            )
        super().__init__(api_key=api_key, host=host or HOST, client=client)


# The workaround: Mem0Tools looks `MemoryClient` up in its own module when it builds its client.
agno_mem0.MemoryClient = EngramMemoryClient


def run_context(user):
    return RunContext(run_id=str(uuid.uuid4()), session_id=f"{RUN}-session", user_id=USERS[user])


class IntegrationCannotError(Exception):
    """The integration refused the call before any request was sent."""


def _decode(returned, what):
    """Agno's tools return JSON on success and a plain message on failure: an error here."""
    try:
        return json.loads(returned)
    except (TypeError, ValueError):
        if isinstance(returned, str) and ENTITY_PARAMS_ERROR in returned:
            raise IntegrationCannotError(returned) from None
        raise RuntimeError(f"{what} returned: {returned}") from None


def _texts(items):
    return [item.get("memory") for item in items if isinstance(item, dict)]


def main():
    doc = {
        "framework": "agno",
        "version": version("agno"),
        "users": dict(USERS),
        "steps": {},
    }
    skipped = {}
    tools = None

    def step(name, fn):
        try:
            doc["steps"][name] = {"ok": True, "result": fn(), "error": None}
        except IntegrationCannotError as e:
            skipped[name] = f"agno {version('agno')} with mem0ai {version('mem0ai')} cannot: {e}"
        except Exception as e:
            doc["steps"][name] = {"ok": False, "result": None, "error": f"{type(e).__name__}: {e}"}

    try:
        tools = Mem0Tools(api_key=API_KEY)
    except Exception as e:
        doc["steps"]["add_alice"] = {
            "ok": False,
            "result": None,
            "error": f"{type(e).__name__}: {e}",
        }

    if tools is not None:

        def add(user, text):
            return _decode(tools.add_memory(run_context(user), text), "add_memory")

        def search(user, query):
            deadline = time.monotonic() + SEARCH_TIMEOUT
            while True:
                texts = _texts(
                    _decode(tools.search_memory(run_context(user), query), "search_memory")
                )
                if texts or time.monotonic() >= deadline:
                    return texts
                time.sleep(1.0)

        def list_all(user):
            return _texts(_decode(tools.get_all_memories(run_context(user)), "get_all_memories"))

        def delete_all(user):
            returned = tools.delete_all_memories(run_context(user))
            if not returned.startswith("Successfully deleted"):
                raise RuntimeError(f"delete_all_memories returned: {returned}")
            return returned

        step("add_alice", lambda: add("alice", "I am allergic to peanuts."))
        step("add_bob", lambda: add("bob", "I live in Lisbon and I play the cello."))
        step("search_alice", lambda: search("alice", "What food should I avoid?"))
        step("search_bob", lambda: search("bob", "Where do I live?"))
        step("list_alice", lambda: list_all("alice"))

        def wait_processed(user):
            deadline = time.monotonic() + SEARCH_TIMEOUT
            while time.monotonic() < deadline:
                if tools.client.get_all(filters={"user_id": USERS[user]}).get("results"):
                    return
                time.sleep(1.0)

        if not (doc["steps"].get("search_alice") or {}).get("result"):
            try:
                wait_processed("alice")
            except Exception as e:
                print(f"waiting for alice's add failed: {type(e).__name__}: {e}", file=sys.stderr)
        step("delete_alice", lambda: delete_all("alice"))
        step("list_alice_after_delete", lambda: list_all("alice"))

    if skipped:
        doc["skipped"] = skipped
    _real_stdout.write(json.dumps(doc) + "\n")
    _real_stdout.flush()


if __name__ == "__main__":
    main()
