"""Drive Strands' mem0_memory tool (strands-agents-tools 0.8.10, mem0ai 0.1.x) against engram.

Run with this folder's environment's Python, with ENGRAM_HOST, ENGRAM_API_KEY and ENGRAM_RUN set
(see ../README.md). Prints one JSON document on stdout; anything else goes to stderr.

The tool picks its backend from the environment: with MEM0_API_KEY set, every call builds a new
`Mem0ServiceClient`, which builds `MemoryClient()` with no arguments, i.e. the cloud
(https://api.mem0.ai); mem0ai 0.1.x reads no host from the environment and the tool takes no
client or host. The workaround: point the name `MemoryClient` in the tool's module at a subclass
whose host defaults to engram:

    strands_tools.mem0_memory.MemoryClient = EngramMemoryClient   # MemoryClient(host=ENGRAM_HOST)

Everything else is the tool's own code. The driver uses the recommended multi-tenant class,
`Mem0MemoryTool(user_id=...)`, one per user, and calls its tool entry point with a ToolUse, as
Strands does when an agent picks the tool (actions store / retrieve / list / delete, with
BYPASS_TOOL_CONSENT=true); no Agent and no model are involved. (With strands-agents 1.62,
`Agent(tools=[Mem0MemoryTool(...).mem0_memory])` does not register the bound method: the
registry logs "unrecognized tool specification"; the module-level `mem0_memory` tool does
register, but is single-tenant, reading MEM0_USER_ID.)

The tool has no delete-all: delete_alice lists alice's memories through the tool and deletes each
by id with the tool's delete action (which first GETs the memory and checks that its user_id is
alice's).

ENGRAM_TRACE=1 logs every HTTP request and response to stderr.
"""

import atexit
import json
import os
import shutil
import sys
import tempfile
import time
import uuid

# Keep the real stdout for the one JSON document; library chatter (the tool prints rich panels,
# mem0 warns, strands logs) goes to stderr, at the file-descriptor level too.
_json_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr

_tmp = tempfile.mkdtemp(prefix="engram-compat-strands-")
atexit.register(shutil.rmtree, _tmp, ignore_errors=True)
os.environ["MEM0_TELEMETRY"] = "False"
os.environ["MEM0_DIR"] = os.path.join(_tmp, "mem0")  # never ~/.mem0
os.environ["OTEL_SDK_DISABLED"] = "true"
os.environ["BYPASS_TOOL_CONSENT"] = "true"
os.environ.setdefault("AWS_REGION", "us-east-1")  # only so that nothing asks; no AWS call is made
# The tool's backend selection: MEM0_API_KEY means the Mem0 Platform (MemoryClient); make sure
# no other backend is selected.
for _name in (
    "OPENSEARCH_HOST",
    "NEPTUNE_ANALYTICS_GRAPH_IDENTIFIER",
    "NEPTUNE_DATABASE_ENDPOINT",
    "MEM0_USER_ID",
    "MEM0_AGENT_ID",
):
    os.environ.pop(_name, None)

HOST = os.environ["ENGRAM_HOST"].rstrip("/")
API_KEY = os.environ["ENGRAM_API_KEY"]
RUN = os.environ["ENGRAM_RUN"]
TRACE = bool(os.environ.get("ENGRAM_TRACE"))
os.environ["MEM0_API_KEY"] = API_KEY

USERS = {"alice": f"{RUN}-alice", "bob": f"{RUN}-bob"}
SEARCH_TIMEOUT_S = 30.0

from importlib.metadata import version  # noqa: E402

import httpx  # noqa: E402
import strands_tools.mem0_memory as strands_mem0  # noqa: E402
from mem0 import MemoryClient  # noqa: E402
from strands_tools.mem0_memory import Mem0MemoryTool  # noqa: E402


def _log_request(request):
    body = request.content.decode("utf-8", "replace") if request.content else ""
    print(f">> {request.method} {request.url} {body}", file=sys.stderr)


def _log_response(response):
    response.read()
    print(f"<< {response.status_code} {response.text}", file=sys.stderr)


class EngramMemoryClient(MemoryClient):
    """mem0ai's MemoryClient, with engram as the default host."""

    def __init__(self, api_key=None, host=None, org_id=None, project_id=None, client=None):
        if client is None and TRACE:
            client = httpx.Client(
                timeout=300, event_hooks={"request": [_log_request], "response": [_log_response]}
            )
        super().__init__(
            api_key=api_key, host=host or HOST, org_id=org_id, project_id=project_id, client=client
        )


# The workaround: the tool looks `MemoryClient` up in its own module each time it builds a client.
strands_mem0.MemoryClient = EngramMemoryClient


class ToolError(Exception):
    """The tool returned status "error" (it catches every exception and returns its message)."""


TOOLS = {user: Mem0MemoryTool(user_id=user_id) for user, user_id in USERS.items()}


def call(user, **tool_input):
    """Invoke the tool as Strands would, with a ToolUse; return its text content."""
    result = TOOLS[user].mem0_memory(
        {"toolUseId": f"tooluse_{uuid.uuid4().hex}", "name": "mem0_memory", "input": tool_input}
    )
    text = "\n".join(c.get("text", "") for c in result.get("content", []))
    if result.get("status") != "success":
        raise ToolError(text)
    return text


def _texts(items):
    return [item.get("memory") for item in items if isinstance(item, dict) and "memory" in item]


def store(user, content):
    return json.loads(call(user, action="store", content=content))


def retrieve(user, query):
    deadline = time.monotonic() + SEARCH_TIMEOUT_S
    while True:
        texts = _texts(json.loads(call(user, action="retrieve", query=query)))
        if texts or time.monotonic() >= deadline:
            return texts
        time.sleep(1.0)


def list_items(user):
    return json.loads(call(user, action="list"))


def delete_all(user):
    items = [item for item in list_items(user) if isinstance(item, dict) and item.get("id")]
    if not items:
        raise RuntimeError("list returned no memories to delete")
    return [call(user, action="delete", memory_id=item["id"]) for item in items]


def main():
    doc = {
        "framework": "strands",
        "version": version("strands-agents-tools"),
        "users": dict(USERS),
        "steps": {},
    }

    def step(name, fn):
        try:
            doc["steps"][name] = {"ok": True, "result": fn(), "error": None}
        except Exception as e:
            doc["steps"][name] = {"ok": False, "result": None, "error": f"{type(e).__name__}: {e}"}

    step("add_alice", lambda: store("alice", "I am allergic to peanuts."))
    step("add_bob", lambda: store("bob", "I live in Lisbon and I play the cello."))
    step("search_alice", lambda: retrieve("alice", "What food should I avoid?"))
    step("search_bob", lambda: retrieve("bob", "Where do I live?"))
    step("list_alice", lambda: _texts(list_items("alice")))
    step("delete_alice", lambda: delete_all("alice"))
    step("list_alice_after_delete", lambda: _texts(list_items("alice")))

    _json_out.write(json.dumps(doc) + "\n")
    _json_out.flush()


if __name__ == "__main__":
    main()
