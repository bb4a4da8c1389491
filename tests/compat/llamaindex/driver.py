"""Drive LlamaIndex's Mem0 memory (llama_index.memory.mem0.Mem0Memory) against a live engram.

Run with this folder's environment's Python, with ENGRAM_HOST, ENGRAM_API_KEY and ENGRAM_RUN set
(see ../README.md). Prints one JSON document on stdout; anything else goes to stderr.

`Mem0Memory.from_client(context=..., api_key=..., host=...)` would be the documented way in, and
it takes a host, but it calls `MemoryClient(api_key=, host=, org_id=, project_id=)`: no mem0ai
2.x client (the range llama-index-memory-mem0 2.1.0 requires, >=2.0.0,<3) accepts org_id or
project_id any more, so it raises TypeError before any request. The workaround is the class's
own constructor with a pre-built client:

    Mem0Memory(primary_memory=Memory.from_defaults(), context={"user_id": uid},
               client=MemoryClient(api_key=..., host=ENGRAM_HOST))

which is exactly what from_client builds. Everything else is LlamaIndex's code, used as a chat
engine or agent uses its memory: `put(ChatMessage)` adds the message to the local chat buffer
and sends it to Mem0 (`client.add(messages=[{role, content}], user_id=...)`), and `get(input=)`
searches Mem0 (`client.search(query="user: <input>", filters={"user_id": ...})`, the query
prefixed by the last messages of the local chat buffer) and returns the chat history with the
memories rendered into a system message. Each search here runs in a new session (a new
Mem0Memory with an empty chat buffer, as a later conversation would), so the query is the
question alone; the texts are read back from that system message.

Mem0Memory cannot list or delete Mem0 memories: `get_all()` returns only the local chat buffer
and `reset()` only clears it, so list_alice, delete_alice and list_alice_after_delete are
reported under "skipped". No LLM is constructed or called.
"""

import json
import os
import re
import sys
import tempfile
import time

os.environ["MEM0_TELEMETRY"] = "False"
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="engram-compat-llamaindex-mem0-"))
os.environ.pop("MEM0_API_KEY", None)
# Never let anything reach for a real model.
os.environ.setdefault("OPENAI_API_KEY", "sk-dummy-not-used")

# Library chatter must not reach stdout.
_real_stdout = sys.stdout
sys.stdout = sys.stderr

from importlib.metadata import version  # noqa: E402

import httpx  # noqa: E402
from llama_index.core.llms import ChatMessage, MessageRole  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from llama_index.memory.mem0 import Mem0Memory  # noqa: E402
from llama_index.memory.mem0.utils import (  # noqa: E402
    DEFAULT_INTRO_PREFERENCES,
    DEFAULT_OUTRO_PREFERENCES,
)
from mem0 import MemoryClient  # noqa: E402

HOST = os.environ["ENGRAM_HOST"].rstrip("/")
API_KEY = os.environ["ENGRAM_API_KEY"]
RUN = os.environ["ENGRAM_RUN"]
TRACE = bool(os.environ.get("ENGRAM_TRACE"))

USERS = {"alice": f"{RUN}-alice", "bob": f"{RUN}-bob"}
SEARCH_TIMEOUT = 30.0
PACKAGE = "llama-index-memory-mem0"


def _log_request(request):
    if TRACE:
        body = request.content.decode("utf-8", "replace") if request.content else ""
        print(f">> {request.method} {request.url} {body}", file=sys.stderr)


def _log_response(response):
    if TRACE:
        response.read()
        print(f"<< {response.status_code} {response.text}", file=sys.stderr)


def make_client():
    http = None
    if TRACE:
        http = httpx.Client(
            timeout=300, event_hooks={"request": [_log_request], "response": [_log_response]}
        )
    return MemoryClient(api_key=API_KEY, host=HOST, client=http)


def new_session(client, user):
    """A new conversation's memory for `user`: an empty chat buffer, backed by Mem0 on engram."""
    return Mem0Memory(
        primary_memory=Memory.from_defaults(),
        context={"user_id": USERS[user]},
        client=client,
    )


_CATEGORIES = re.compile(r"^\[[^\]]*\] : ")


def _memory_texts(messages):
    """The memories Mem0Memory.get() rendered into its system message, one string each."""
    if not messages or messages[0].role != MessageRole.SYSTEM:
        raise RuntimeError(f"get() returned no system message: {messages!r}")
    content = messages[0].content or ""
    if DEFAULT_INTRO_PREFERENCES not in content:
        raise RuntimeError(f"get() system message has no memories section: {content!r}")
    section = content.split(DEFAULT_INTRO_PREFERENCES, 1)[1]
    section = section.rsplit(DEFAULT_OUTRO_PREFERENCES, 1)[0]
    texts = []
    for chunk in section.split("\n\n"):
        text = chunk.strip()
        if text:
            # format_memory_json writes "[cat1, cat2] : memory" when a memory has categories.
            texts.append(_CATEGORIES.sub("", text))
    return texts


def main():
    doc = {
        "framework": "llamaindex",
        "version": version(PACKAGE),
        "users": dict(USERS),
        "steps": {},
    }
    skipped = {}

    def step(name, fn):
        try:
            doc["steps"][name] = {"ok": True, "result": fn(), "error": None}
        except Exception as e:
            doc["steps"][name] = {"ok": False, "result": None, "error": f"{type(e).__name__}: {e}"}

    client = None
    try:
        client = make_client()
    except Exception as e:
        doc["steps"]["add_alice"] = {
            "ok": False,
            "result": None,
            "error": f"{type(e).__name__}: {e}",
        }

    if client is not None:
        sessions = {}

        def add(user, text):
            memory = sessions[user] = new_session(client, user)
            memory.put(ChatMessage(role=MessageRole.USER, content=text))  # returns None
            return {"chat_history": [m.content for m in memory.get_all()]}

        def search(user, query):
            memory = new_session(client, user)
            deadline = time.monotonic() + SEARCH_TIMEOUT
            while True:
                texts = _memory_texts(memory.get(input=query))
                if texts or time.monotonic() >= deadline:
                    return texts
                time.sleep(1.0)

        step("add_alice", lambda: add("alice", "I am allergic to peanuts."))
        step("add_bob", lambda: add("bob", "I live in Lisbon and I play the cello."))
        step("search_alice", lambda: search("alice", "What food should I avoid?"))
        step("search_bob", lambda: search("bob", "Where do I live?"))

    ver = f"{PACKAGE} {doc['version']}"
    skipped["list_alice"] = (
        f"{ver}: Mem0Memory has no way to list Mem0 memories; get_all() returns only the local "
        "chat buffer (primary_memory), never calls Mem0"
    )
    skipped["delete_alice"] = (
        f"{ver}: Mem0Memory has no delete; reset() clears only the local chat buffer"
    )
    skipped["list_alice_after_delete"] = f"{ver}: no list and no delete (see above)"

    doc["skipped"] = skipped
    _real_stdout.write(json.dumps(doc) + "\n")
    _real_stdout.flush()


if __name__ == "__main__":
    main()
