"""CrewAI's Mem0 memory (crewai 1.9.3, Mem0Storage behind ExternalMemory) against a live engram.

Run with the folder's environment's Python, with ENGRAM_HOST, ENGRAM_API_KEY and ENGRAM_RUN set.
Prints one JSON document on stdout (see ../README.md); everything else goes to stderr.

CrewAI's Mem0Storage builds `MemoryClient(api_key=...)` itself, which always talks to the cloud
(https://api.mem0.ai): mem0ai 0.1.x reads no host from the environment. The workaround is the
smallest subclass, overriding only how the client is built, handed to ExternalMemory as its
storage:

    class EngramMem0Storage(Mem0Storage):
        def _initialize_memory(self):
            self.memory = MemoryClient(host=ENGRAM_HOST, api_key=self.config["api_key"])

Everything else (what save() sends, what search() sends and reads) is CrewAI's own code.
"""

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

# Keep the real stdout for the one JSON document; library chatter (CrewAI's console, warnings)
# goes to stderr, at the file-descriptor level too.
_json_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr

_tmp = tempfile.mkdtemp(prefix="engram-compat-crewai-")
# CrewAI writes under the home directory at import (~/.config/crewai,
# ~/.local/share/crewai/credentials): give it a throw-away one.
os.environ["HOME"] = os.path.join(_tmp, "home")
os.makedirs(os.environ["HOME"])
os.environ["MEM0_TELEMETRY"] = "False"
os.environ["MEM0_DIR"] = os.path.join(_tmp, "mem0")  # never ~/.mem0
os.environ["XDG_DATA_HOME"] = os.path.join(_tmp, "data")  # CrewAI's own storage dir, if any
os.environ["CREWAI_STORAGE_DIR"] = "engram-compat"
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["CREWAI_DISABLE_TRACKING"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"
os.environ["OTEL_SDK_DISABLED"] = "true"
os.environ.pop("MEM0_API_KEY", None)

HOST = os.environ["ENGRAM_HOST"].rstrip("/")
API_KEY = os.environ["ENGRAM_API_KEY"]
RUN = os.environ["ENGRAM_RUN"]
USERS = {"alice": f"{RUN}-alice", "bob": f"{RUN}-bob"}

SEARCH_TIMEOUT_S = 30.0

doc = {
    "framework": "crewai",
    "version": None,
    "users": USERS,
    "steps": {},
    "skipped": {},
}

# Every HTTP exchange the wrapped client makes, for stderr and for the add steps' results.
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


def step(name, fn):
    try:
        doc["steps"][name] = {"ok": True, "result": fn(), "error": None}
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        doc["steps"][name] = {"ok": False, "result": None, "error": f"{type(exc).__name__}: {exc}"}


def main():
    from importlib.metadata import version

    doc["version"] = version("crewai")

    from crewai.memory.external.external_memory import ExternalMemory
    from crewai.memory.storage.mem0_storage import Mem0Storage
    from mem0 import MemoryClient

    class EngramMem0Storage(Mem0Storage):
        """CrewAI's Mem0Storage, with its MemoryClient pointed at engram instead of the cloud."""

        def _initialize_memory(self):
            self.memory = MemoryClient(host=HOST, api_key=self.config["api_key"])
            # Instrumentation only: record what CrewAI sends and what engram answers.
            self.memory.client.event_hooks["request"].append(_on_request)
            self.memory.client.event_hooks["response"].append(_on_response)

    def memory_for(user_id):
        # What CrewAI would build from
        # ExternalMemory(embedder_config={"provider": "mem0",
        #     "config": {"user_id": ..., "api_key": ...}}),
        # but with engram's host.
        storage = EngramMem0Storage(
            type="external", config={"user_id": user_id, "api_key": API_KEY}
        )
        return ExternalMemory(storage=storage)

    memories = {}

    def add(who, text):
        def run():
            memories[who] = mem = memory_for(USERS[who])
            before = len(http_log)
            # As CrewAI's agent executor saves external memory: the task output as `value` and
            # the conversation in metadata["messages"]; Mem0Storage sends the last user message
            # (and the last assistant message, here none) to Mem0. Without "messages" it would
            # send `value` as an assistant message, which engram's extractor does not keep.
            returned = mem.save(
                value=text, metadata={"messages": [{"role": "user", "content": text}]}
            )
            adds = [e for e in http_log[before:] if e["url"].endswith("/v1/memories/")]
            return {
                "returned": returned,
                "sent": adds[-1]["json"] if adds else None,
                "status": adds[-1].get("status") if adds else None,
                "answer": adds[-1].get("body") if adds else None,
            }

        return run

    def search(who, query):
        def run():
            mem = memories.get(who) or memory_for(USERS[who])
            deadline = time.monotonic() + SEARCH_TIMEOUT_S
            while True:
                results = mem.search(query)  # CrewAI defaults: limit=5, score_threshold=0.6
                texts = [r.get("memory") or r.get("content") for r in results]
                if texts or time.monotonic() >= deadline:
                    return texts
                time.sleep(1.0)

        return run

    step("add_alice", add("alice", "I am allergic to peanuts."))
    step("add_bob", add("bob", "I live in Lisbon and I play the cello."))
    step("search_alice", search("alice", "What food should I avoid?"))
    step("search_bob", search("bob", "Where do I live?"))

    doc["skipped"] = {
        "list_alice": (
            "CrewAI's Mem0Storage / ExternalMemory expose only save(), search() and reset(): "
            "there is no list (get_all) of a user's memories"
        ),
        "delete_alice": (
            "CrewAI has no per-memory or per-user delete; its only deletion is reset(), which "
            "calls MemoryClient.reset() -> delete_users() with no filter, deleting every entity "
            "(all users, agents, apps, runs) the API key can see, not alice alone"
        ),
        "list_alice_after_delete": "no list and no per-user delete in the integration (see above)",
    }


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # import or setup failure: still one JSON document
        traceback.print_exc(file=sys.stderr)
        doc["error"] = f"{type(exc).__name__}: {exc}"
    _json_out.write(json.dumps(doc, indent=2, default=str) + "\n")
    _json_out.flush()
    shutil.rmtree(_tmp, ignore_errors=True)
