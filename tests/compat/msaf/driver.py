"""Microsoft Agent Framework's Mem0 provider (agent-framework-mem0) against a live engram.

Drives `Mem0ContextProvider`'s own hooks as an agent run would: `after_run` stores the
run's messages (the user's message and the assistant's reply), `before_run` searches and
injects the memories into the run's context. The provider is pointed at engram by handing it
a pre-built `AsyncMemoryClient(host=..., api_key=...)` (it builds one for the Mem0 cloud
otherwise). The provider has no list or delete of its own: those steps use the mem0ai client
it wraps and exposes (`provider.mem0_client`).

Env: ENGRAM_HOST, ENGRAM_API_KEY, ENGRAM_RUN (unique tag for this run's user ids);
ENGRAM_TRACE=1 logs every HTTP request and response to stderr.
Prints exactly one JSON document on stdout.
"""

import asyncio
import atexit
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time

# Before importing mem0 (or the provider, which imports it): no telemetry, no ~/.mem0.
os.environ["MEM0_TELEMETRY"] = "False"
os.environ["MEM0_DIR"] = tempfile.mkdtemp(prefix="mem0-msaf-")
atexit.register(shutil.rmtree, os.environ["MEM0_DIR"], True)

_STDOUT = sys.stdout
sys.stdout = sys.stderr  # any library chatter goes to stderr; the JSON goes to _STDOUT
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)

import httpx  # noqa: E402
from agent_framework import AgentResponse, AgentSession, BaseAgent, Message, SessionContext  # noqa: E402
from agent_framework_mem0 import Mem0ContextProvider, __version__  # noqa: E402
from mem0 import AsyncMemoryClient  # noqa: E402

HOST = os.environ["ENGRAM_HOST"].rstrip("/")
API_KEY = os.environ["ENGRAM_API_KEY"]
RUN = os.environ["ENGRAM_RUN"]
TRACE = os.environ.get("ENGRAM_TRACE") not in (None, "", "0")

USERS = {"alice": f"{RUN}-alice", "bob": f"{RUN}-bob"}
AGENT_ID = f"{RUN}-assistant"  # one agent serving both users, as a deployed agent would

SAYS = {
    "alice": ("I am allergic to peanuts.", "Thanks, I'll keep that in mind."),
    "bob": ("I live in Lisbon and I play the cello.", "Lisbon and the cello, noted."),
}
ASKS = {"alice": "What food should I avoid?", "bob": "Where do I live?"}
SEARCH_TIMEOUT_S = 30.0


class _ProviderErrors(logging.Handler):
    """The provider logs (and swallows) a failed search; collect those so a step can say so."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text = f"{type(exc).__name__}: {exc}"
        self.records.append(text)


PROVIDER_ERRORS = _ProviderErrors()
logging.getLogger("agent_framework_mem0").addHandler(PROVIDER_ERRORS)


async def _trace_request(request: httpx.Request) -> None:
    body = request.content.decode("utf-8", "replace") if request.content else ""
    print(f">>> {request.method} {request.url} {body}", file=sys.stderr)


async def _trace_response(response: httpx.Response) -> None:
    await response.aread()
    print(f"<<< {response.status_code} {response.text}", file=sys.stderr)


def make_provider(user: str) -> Mem0ContextProvider:
    """The provider as an app would build it for one user of a shared agent."""
    http = None
    if TRACE:
        http = httpx.AsyncClient(
            timeout=300, event_hooks={"request": [_trace_request], "response": [_trace_response]}
        )
    # The workaround: a pre-built client for engram instead of the default cloud one.
    client = AsyncMemoryClient(host=HOST, api_key=API_KEY, client=http)
    return Mem0ContextProvider(
        mem0_client=client,
        user_id=USERS[user],  # storage scope: every stored memory is stamped with these
        agent_id=AGENT_ID,
        search_user_id=USERS[user],  # retrieval scope: this user's memories only
    )


async def add(provider: Mem0ContextProvider, agent: BaseAgent, session: AgentSession, user: str):
    said, replied = SAYS[user]
    context = SessionContext(
        session_id=session.session_id, input_messages=[Message(role="user", contents=[said])]
    )
    # After the model answered, the framework sets the run's response on the context.
    context._response = AgentResponse(messages=[Message(role="assistant", contents=[replied])])
    await provider.after_run(
        agent=agent,
        session=session,
        context=context,
        state=session.state.setdefault(provider.source_id, {}),
    )
    return {
        "stored": [{"role": "user", "content": said}, {"role": "assistant", "content": replied}]
    }


async def search(provider: Mem0ContextProvider, agent: BaseAgent, session: AgentSession, user: str):
    deadline = time.monotonic() + SEARCH_TIMEOUT_S
    while True:
        PROVIDER_ERRORS.records.clear()
        context = SessionContext(
            session_id=session.session_id,
            input_messages=[Message(role="user", contents=[ASKS[user]])],
        )
        await provider.before_run(
            agent=agent,
            session=session,
            context=context,
            state=session.state.setdefault(provider.source_id, {}),
        )
        texts: list[str] = []
        for message in context.context_messages.get(provider.source_id, []):
            body = message.text
            if body.startswith(provider.context_prompt):
                body = body[len(provider.context_prompt) :]
            texts.extend(line for line in body.split("\n") if line.strip())
        if texts:
            return texts
        if time.monotonic() >= deadline:
            if PROVIDER_ERRORS.records:
                raise RuntimeError("; ".join(PROVIDER_ERRORS.records))
            return texts
        await asyncio.sleep(1.0)


async def list_memories(provider: Mem0ContextProvider, user: str) -> list[str]:
    texts: list[str] = []
    page = 1
    while True:
        answer = await provider.mem0_client.get_all(
            filters={"user_id": USERS[user]}, page=page, page_size=100
        )
        results = answer.get("results", []) if isinstance(answer, dict) else answer
        texts.extend(str(m.get("memory", "")) for m in results)
        if not (isinstance(answer, dict) and answer.get("next")) or not results:
            return texts
        page += 1


async def main() -> dict:
    doc: dict = {
        "framework": "msaf",
        "version": __version__,
        "users": dict(USERS),
        "steps": {},
        "skipped": {},
        "notes": {
            "list_alice": "Mem0ContextProvider has no list method; uses its mem0ai client, "
            "provider.mem0_client.get_all(filters={'user_id': ...})",
            "delete_alice": "Mem0ContextProvider has no delete method; uses its mem0ai client, "
            "provider.mem0_client.delete_all(user_id=...)",
        },
    }
    steps = doc["steps"]

    async def step(name, coro_fn):
        try:
            steps[name] = {"ok": True, "result": await coro_fn(), "error": None}
        except Exception as exc:
            steps[name] = {"ok": False, "result": None, "error": f"{type(exc).__name__}: {exc}"}

    providers: dict = {}
    agents: dict = {}
    sessions: dict = {}
    for user in ("alice", "bob"):
        try:
            providers[user] = make_provider(user)
            agents[user] = BaseAgent(name="assistant", context_providers=[providers[user]])
            sessions[user] = AgentSession()
        except Exception as exc:
            providers[user] = None
            doc.setdefault("setup_errors", {})[user] = f"{type(exc).__name__}: {exc}"

    def need(user):
        if providers[user] is None:
            raise RuntimeError(
                f"provider for {user} could not be built: {doc['setup_errors'][user]}"
            )
        return providers[user], agents[user], sessions[user]

    await step("add_alice", lambda: add(*need("alice"), "alice"))
    await step("add_bob", lambda: add(*need("bob"), "bob"))
    await step("search_alice", lambda: search(*need("alice"), "alice"))
    await step("search_bob", lambda: search(*need("bob"), "bob"))
    await step("list_alice", lambda: list_memories(need("alice")[0], "alice"))
    await step(
        "delete_alice", lambda: need("alice")[0].mem0_client.delete_all(user_id=USERS["alice"])
    )
    await step("list_alice_after_delete", lambda: list_memories(need("alice")[0], "alice"))

    for provider in providers.values():
        if provider is not None:
            with contextlib.suppress(Exception):  # closing only: the steps are recorded
                await provider.mem0_client.async_client.aclose()
    if not doc["skipped"]:
        del doc["skipped"]
    return doc


if __name__ == "__main__":
    result = asyncio.run(main())
    _STDOUT.write(json.dumps(result, indent=2, default=str) + "\n")
    _STDOUT.flush()
