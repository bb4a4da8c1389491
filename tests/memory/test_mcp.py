"""The MCP endpoint through the official SDK's clients: streamable HTTP against a live server,
and the engram-mcp stdio script driven by the SDK's stdio client.

Personas: acme/mcp's key (Alice's project) and globex/mcp's key (another project, sees nothing).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import pytest
from django.conf import settings
from django.test import override_settings
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from audit.models import AccessLog
from config import deadlines
from memory.models import DELETED_BEFORE_PROCESSING, Memory, MemoryEvent
from memory.search import DEFAULT_THRESHOLD
from tenants.actions import NewApiKey
from tenants.db import project_context
from tests.config.test_deadlines import memories_locked
from tests.factory import make_key

# Mem0's hosted MCP server's tools (shared/reference/mem0-api.md 7.1), with their arguments.
MEM0_TOOLS = {
    "add_memory": {"text", "messages", "user_id", "agent_id", "app_id", "run_id", "metadata",
                   "infer", "source"},
    "search_memories": {"query", "filters", "top_k", "source"},
    "get_memories": {"filters", "page", "page_size", "source"},
    "get_memory": {"memory_id", "source"},
    "update_memory": {"memory_id", "text", "source"},
    "delete_memory": {"memory_id", "source"},
    "delete_all_memories": {"user_id", "agent_id", "app_id", "run_id", "source"},
    "delete_entities": {"user_id", "agent_id", "app_id", "run_id", "source"},
    "list_entities": {"source"},
    "list_events": {"event_type", "page", "page_size", "source"},
    "get_event_status": {"event_id", "source"},
    # engram's own: the context block (memory/context.py).
    "get_context": {"query", "filters", "max_tokens", "source"},
}  # fmt: skip

Work = Callable[[Client], Awaitable[Any]]


async def _connect(url: str, headers: dict[str, str], work: Work) -> Any:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return await work(client)


def session(live_api: str, key: NewApiKey, work: Work, path: str = "/mcp/", **headers: str) -> Any:
    """Run `work` with an SDK client connected to the live server's MCP endpoint as `key`."""
    headers["Authorization"] = f"Token {key.raw}"
    return anyio.run(_connect, live_api + path, headers, work)


def call(live_api: str, key: NewApiKey, tool: str, path: str = "/mcp/", **arguments: Any) -> Any:
    """One tool call on a connection of its own."""

    async def work(client: Client) -> CallToolResult:
        return await client.call_tool(tool, arguments)

    return session(live_api, key, work, path)


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def active_texts(key: NewApiKey) -> set[str]:
    with project_context(key.key.project_id):
        return set(Memory.objects.active().values_list("text", flat=True))


@pytest.fixture
def acme(live_api: str) -> NewApiKey:
    return make_key("acme", "mcp")


def add(live_api: str, key: NewApiKey, memory: str, user_id: str = "alice") -> str:
    result = call(live_api, key, "add_memory", text=memory, user_id=user_id, infer=False)
    assert not result.is_error, text(result)
    memory_id: str = result.structured_content["results"][0]["id"]
    return memory_id


def test_it_lists_mem0s_tools_with_their_arguments(live_api: str, acme: NewApiKey) -> None:
    async def work(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = session(live_api, acme, work)
    assert {t.name: set(t.input_schema["properties"]) for t in tools} == MEM0_TOOLS
    assert all(len(t.description or "") > 60 for t in tools)  # says when to use it
    required = {t.name: t.input_schema.get("required", []) for t in tools}
    assert required["search_memories"] == ["query"]
    assert required["update_memory"] == ["memory_id", "text"]


def test_it_adds_searches_updates_and_deletes(live_api: str, acme: NewApiKey) -> None:
    coffee = add(live_api, acme, "I love dark roast coffee")
    add(live_api, acme, "My sister lives in Lisbon")

    found = call(live_api, acme, "search_memories", query="what does the user drink?",
                 filters={"user_id": "alice"}, top_k=1)  # fmt: skip
    assert [r["id"] for r in found.structured_content["results"]] == [coffee]
    assert "I love dark roast coffee" in text(found)

    page = call(live_api, acme, "get_memories", filters={"user_id": "alice"}, page_size=1)
    assert (page.structured_content["count"], len(page.structured_content["results"])) == (2, 1)

    updated = call(live_api, acme, "update_memory", memory_id=coffee, text="I love green tea")
    assert updated.structured_content["memory"] == "I love green tea"
    got = call(live_api, acme, "get_memory", memory_id=coffee)
    assert (got.structured_content["memory"], got.structured_content["user_id"]) == (
        "I love green tea", "alice",
    )  # fmt: skip

    assert not call(live_api, acme, "delete_memory", memory_id=coffee).is_error
    assert active_texts(acme) == {"My sister lives in Lisbon"}
    gone = call(live_api, acme, "get_memory", memory_id=coffee)
    assert gone.is_error and "Not found" in text(gone)


def test_a_search_says_when_nothing_is_relevant(live_api: str, acme: NewApiKey) -> None:
    add(live_api, acme, "I love dark roast coffee")
    add(live_api, acme, "My sister lives in Lisbon")
    alice: dict[str, Any] = {"filters": {"user_id": "alice"}}

    off = call(live_api, acme, "search_memories", query="What is her blood type?", **alice)
    assert (off.structured_content["results"], off.structured_content["nothing_relevant"]) == (
        [], True,
    )  # fmt: skip
    assert 0 < off.structured_content["best_score"] < DEFAULT_THRESHOLD
    assert "no memory is about this" in text(off) and not off.is_error
    on = call(live_api, acme, "search_memories", query="what does the user drink?", **alice)
    assert on.structured_content["nothing_relevant"] is False
    empty = call(live_api, acme, "search_memories", query="coffee", filters={"user_id": "zed"})
    assert empty.structured_content["best_score"] is None
    assert "no memory is stored" in text(empty)


def test_get_context_gives_the_fenced_block_or_says_nothing_is_relevant(
    live_api: str, acme: NewApiKey
) -> None:
    coffee = add(live_api, acme, "I love dark roast coffee")
    add(live_api, acme, "My sister lives in Lisbon")
    alice: dict[str, Any] = {"filters": {"user_id": "alice"}}
    block = call(live_api, acme, "get_context", query="what does the user drink?", **alice)
    assert not block.is_error
    lines = text(block).splitlines()
    assert (lines[1], lines[-1]) == ("<recalled_memory>", "</recalled_memory>")
    assert "I love dark roast coffee" in lines[2]
    assert block.structured_content["memory_ids"][0] == coffee
    assert block.structured_content["tokens"] <= 400
    off = call(live_api, acme, "get_context", query="What is her blood type?", **alice)
    assert text(off) == "Nothing stored is relevant."
    assert off.structured_content["nothing_relevant"] is True and not off.is_error
    small = call(live_api, acme, "get_context", max_tokens=10, **alice)
    assert small.is_error and "max_tokens" in text(small)


def test_it_deletes_a_scope_and_entities_and_lists_entities(live_api: str, acme: NewApiKey) -> None:
    add(live_api, acme, "Alice plays chess")
    add(live_api, acme, "Bob keeps bees", user_id="bob")
    add(live_api, acme, "Carol sails", user_id="carol")

    entities = call(live_api, acme, "list_entities").structured_content["results"]
    assert {(e["type"], e["id"], e["total_memories"]) for e in entities} == {
        ("user", "alice", 1), ("user", "bob", 1), ("user", "carol", 1),
    }  # fmt: skip

    deleted = call(live_api, acme, "delete_all_memories", user_id="alice")
    assert deleted.structured_content["deleted"] == 1
    refused = call(live_api, acme, "delete_all_memories")
    assert refused.is_error and "Name what to delete" in text(refused)
    assert not call(live_api, acme, "delete_entities", user_id="bob").is_error
    assert active_texts(acme) == {"Carol sails"}


def test_it_queues_an_inferred_add_and_reports_its_event(live_api: str, acme: NewApiKey) -> None:
    queued = call(live_api, acme, "add_memory", text="I moved to Porto", user_id="alice")
    assert queued.structured_content["status"] == "PENDING"
    event_id = queued.structured_content["event_id"]

    status = call(live_api, acme, "get_event_status", event_id=event_id)
    assert (status.structured_content["id"], status.structured_content["status"]) == (
        event_id, "PENDING",
    )  # fmt: skip
    events = call(live_api, acme, "list_events", event_type="ADD")
    assert [e["id"] for e in events.structured_content["results"]] == [event_id]
    assert (
        call(live_api, acme, "list_events", event_type="SEARCH").structured_content["results"] == []
    )
    with project_context(acme.key.project_id):
        assert MemoryEvent.objects.get(pk=event_id).user_id == "alice"
    # Deleting the scope covers the request not processed yet (issue #50).
    call(live_api, acme, "delete_all_memories", user_id="alice")
    with project_context(acme.key.project_id):
        ended = MemoryEvent.objects.get(pk=event_id)
    assert (ended.status, ended.warning) == ("SUCCEEDED", DELETED_BEFORE_PROCESSING)


def test_it_refuses_a_missing_or_bad_key(live_api: str, acme: NewApiKey) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({}, {"Authorization": "Token eng_not-a-key"}, {"Authorization": "Bearer x"}):
        response = httpx2.post(f"{live_api}/mcp/", json=initialize, headers={**accept, **headers})
        assert response.status_code == 401
        assert response.json()["detail"]
    with project_context(None):  # refused requests are logged without a project
        assert AccessLog.objects.filter(path="/mcp/", status=401, project=None).count() == 3

    bad = NewApiKey(key=acme.key, raw="eng_" + "x" * 40)
    with pytest.raises(Exception):  # noqa: B017 - the SDK's own error for a 401
        call(live_api, bad, "list_entities")
    bearer = httpx2.post(f"{live_api}/mcp", json=initialize,
                         headers={**accept, "Authorization": f"Bearer {acme.raw}"})  # fmt: skip
    assert bearer.status_code == 200 and bearer.json()["result"]["serverInfo"]["name"] == "engram"


def test_another_projects_key_sees_nothing(live_api: str, acme: NewApiKey) -> None:
    secret = add(live_api, acme, "Alice's PIN is 4321")
    globex = make_key("globex", "mcp")

    found = call(live_api, globex, "search_memories", query="PIN", filters={"user_id": "alice"})
    assert found.structured_content["results"] == []
    listed = call(live_api, globex, "get_memories", filters={"user_id": "alice"})
    assert listed.structured_content["count"] == 0
    assert call(live_api, globex, "get_memory", memory_id=secret).is_error
    assert call(live_api, globex, "delete_memory", memory_id=secret).is_error
    assert call(live_api, globex, "update_memory", memory_id=secret, text="hacked").is_error
    assert call(live_api, globex, "list_entities").structured_content["results"] == []
    assert active_texts(acme) == {"Alice's PIN is 4321"}


def test_a_connection_fixed_to_a_user_cannot_reach_another(live_api: str, acme: NewApiKey) -> None:
    bobs = add(live_api, acme, "Bob's diary is private", user_id="bob")
    add(live_api, acme, "Alice likes tea")
    pinned = "/mcp/?user_id=alice"

    attempts: list[tuple[str, dict[str, Any]]] = [
        ("search_memories", {"query": "diary", "filters": {"user_id": "bob"}}),
        ("search_memories", {"query": "diary", "filters": {"OR": [{"user_id": "bob"}]}}),
        ("get_memories", {"filters": {"user_id": {"in": ["alice", "bob"]}}}),
        ("add_memory", {"text": "Bob owes me", "user_id": "bob", "infer": False}),
        ("delete_all_memories", {"user_id": "bob"}),
        ("delete_entities", {"user_id": "bob"}),
        ("get_memory", {"memory_id": bobs}),
        ("delete_memory", {"memory_id": bobs}),
    ]

    async def work(client: Client) -> list[CallToolResult]:
        return [await client.call_tool(tool, arguments) for tool, arguments in attempts]

    for result, attempt in zip(session(live_api, acme, work, pinned), attempts, strict=True):
        assert result.is_error, attempt
    assert active_texts(acme) == {"Bob's diary is private", "Alice likes tea"}

    # Unnamed, the user is the fixed one; the header fixes it as the query parameter does.
    found = call(live_api, acme, "search_memories", path=pinned, query="diary tea")
    assert [r["memory"] for r in found.structured_content["results"]] == ["Alice likes tea"]
    added = session(live_api, acme, lambda c: c.call_tool("add_memory", {
        "text": "Alice runs", "infer": False}), **{"X-Engram-User-Id": "alice"})  # fmt: skip
    assert not added.is_error
    entities = call(live_api, acme, "list_entities", path=pinned).structured_content["results"]
    assert [(e["id"], e["total_memories"]) for e in entities] == [("alice", 2)]


def test_hostile_arguments_are_tool_errors_and_store_nothing(
    live_api: str, acme: NewApiKey
) -> None:
    hostile: list[tuple[str, dict[str, Any]]] = [
        ("add_memory", {"text": "nul \x00 byte", "user_id": "alice", "infer": False}),
        ("add_memory", {"text": "x" * 30_000, "user_id": "alice", "infer": False}),
        ("add_memory", {"text": "no scope", "infer": False}),
        ("add_memory", {"text": "ok", "user_id": ["alice"], "infer": False}),
        ("add_memory", {"text": "ok", "user_id": "alice", "metadata": {"user_id": "bob"}}),
        ("search_memories", {"query": "x", "top_k": "many"}),
        ("search_memories", {"query": "x", "filters": {"nope": 1}}),
        ("get_memories", {"filters": 5}),
        ("get_memories", {"page": 0}),
        ("get_memory", {"memory_id": "'; DROP TABLE memory_memory; --"}),
        ("get_event_status", {"event_id": "not-a-uuid"}),
        ("no_such_tool", {}),
    ]

    async def work(client: Client) -> list[CallToolResult]:
        return [await client.call_tool(tool, arguments) for tool, arguments in hostile]

    for result, attempt in zip(session(live_api, acme, work), hostile, strict=True):
        assert result.is_error and text(result), attempt
    # A lone surrogate cannot be encoded by a client: sent as the JSON escape it is, the SDK's
    # parser refuses the message (a JSON-RPC parse error, HTTP 400).
    surrogate = httpx2.post(
        f"{live_api}/mcp/",
        headers={
            "Authorization": f"Token {acme.raw}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
        content=b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": '
        b'"add_memory", "arguments": {"text": "lone \\ud800", "user_id": "alice"}}}',
    )
    assert (surrogate.status_code, surrogate.json()["error"]["code"]) == (400, -32700)
    assert active_texts(acme) == set()
    with project_context(acme.key.project_id):
        assert not MemoryEvent.objects.exists()
    nul = call(live_api, acme, "add_memory", text="a\x00", user_id="alice")
    assert "NUL" in text(nul)


def test_every_call_leaves_one_access_log_row(live_api: str, acme: NewApiKey) -> None:
    memory_id = add(live_api, acme, "Alice likes tea")
    before = rows(acme)

    async def work(client: Client) -> None:
        await client.call_tool("get_memory", {"memory_id": memory_id})
        await client.call_tool("search_memories", {"query": "tea", "filters": {"user_id": "x"}})
        await client.call_tool("get_memory", {"memory_id": str(uuid.uuid4())})
        await client.call_tool("add_memory", {"text": "\x00", "user_id": "alice"})
        await client.call_tool("no_such_tool", {})

    session(live_api, acme, work)
    calls = [r for r in rows(acme) if r.id not in {b.id for b in before}]
    tools = {*MEM0_TOOLS, "no_such_tool"}
    tool_rows = [(r.action, r.status, r.result_count) for r in calls if r.action[4:] in tools]
    assert tool_rows == [
        ("mcp:get_memory", 200, 1),
        ("mcp:search_memories", 200, 0),
        ("mcp:get_memory", 404, None),
        ("mcp:add_memory", 400, None),
        ("mcp:no_such_tool", 400, None),
    ]
    first = next(r for r in calls if r.action == "mcp:get_memory")
    assert (first.scope, first.path, first.method) == ({"user_id": "alice"}, "/mcp/", "POST")
    assert {r.api_key_id for r in calls} == {acme.key.pk}


def rows(key: NewApiKey) -> list[AccessLog]:
    with project_context(key.key.project_id):
        return list(AccessLog.objects.filter(path__startswith="/mcp").order_by("created_at"))


def test_the_stdio_script_relays_the_same_tools(live_api: str, acme: NewApiKey) -> None:
    script = shutil.which("engram-mcp", path=os.path.dirname(sys.executable))  # pyproject's script
    assert script is not None
    environment = {"PATH": os.environ["PATH"], "ENGRAM_URL": live_api,
                   "ENGRAM_API_KEY": acme.raw, "ENGRAM_USER_ID": "alice"}  # fmt: skip

    async def work() -> tuple[Any, ...]:
        params = StdioServerParameters(command=script, env=environment)
        async with Client(params) as client:
            tools = await client.list_tools()
            added = await client.call_tool("add_memory", {"text": "I keep bees", "infer": False})
            found = await client.call_tool("search_memories", {"query": "bees"})
            refused = await client.call_tool("get_memories", {"filters": {"user_id": "bob"}})
            return tools, added, found, refused

    tools, added, found, refused = anyio.run(work)
    assert {t.name for t in tools.tools} == set(MEM0_TOOLS)
    assert added.structured_content["results"][0]["memory"] == "I keep bees"
    assert [r["user_id"] for r in found.structured_content["results"]] == ["alice"]
    assert refused.is_error and "fixed to user_id='alice'" in text(refused)


def test_it_answers_other_methods_and_a_bad_fixed_scope_without_running_a_tool(
    live_api: str, acme: NewApiKey
) -> None:
    headers = {
        "Authorization": f"Token {acme.raw}",
        "Accept": "application/json, text/event-stream",
    }
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for method in ("GET", "DELETE"):  # stateless: no stream to open, no session to end
        response = httpx2.request(method, f"{live_api}/mcp/", headers=headers)
        assert response.status_code == 405, (method, response.text)
    for fixed in ({"X-Engram-User-Id": "u" * 300}, {"X-Engram-User-Id": "*"}):
        response = httpx2.post(f"{live_api}/mcp/", json=listing, headers={**headers, **fixed})
        assert response.status_code == 400 and "user_id" in response.json()["detail"]
    clash = httpx2.post(f"{live_api}/mcp/?user_id=bob", json=listing,
                        headers={**headers, "X-Engram-User-Id": "alice"})  # fmt: skip
    assert clash.status_code == 400 and "differ" in clash.json()["detail"]


def test_every_refusal_is_a_json_rpc_error_with_detail_and_leaves_a_row(
    live_api: str, acme: NewApiKey
) -> None:
    key = {"Authorization": f"Token {acme.raw}"}
    json_body = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    listing = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    refusals = [
        ("/mcp/", "[" * 4096, {**json_body, **key}),  # deeper than the parser's recursion limit
        ("/mcp/", "{not json", {**json_body, **key}),
        ("/mcp/", listing, {**json_body, **key, "Content-Type": "text/plain"}),
        ("/mcp/", listing, {**json_body, **key, "Accept": "text/html"}),
        ("/mcp/", listing, json_body),  # no key
        ("/mcp/?user_id=%00", listing, {**json_body, **key}),  # refused before the view
    ]
    statuses = []
    for path, body, headers in refusals:
        response = httpx2.post(f"{live_api}{path}", content=body, headers=headers)
        assert 400 <= response.status_code < 500, (path, headers, response.text[:300])
        assert response.headers["content-type"] == "application/json", response.text[:300]
        answer = response.json()
        assert answer["detail"] and answer["error"]["message"] == answer["detail"], answer
        assert answer["jsonrpc"] == "2.0" and isinstance(answer["error"]["code"], int)
        statuses.append(response.status_code)
    with project_context(None):  # the refusals without a (valid) key have no project
        anonymous = list(AccessLog.objects.filter(project=None).values_list("status", flat=True))
    assert sorted([*(r.status for r in rows(acme)), *anonymous]) == sorted(statuses)


def test_a_call_past_the_database_deadline_says_busy_retry_later(
    live_api: str, acme: NewApiKey, caplog: pytest.LogCaptureFixture
) -> None:
    """As the REST API's 503: the seconds of its Retry-After, a warning without a traceback, and
    the access log's row records the 503."""
    memory_id = add(live_api, acme, "Alice likes tea")
    api = {"statement_timeout": 300, "lock_timeout": 0}
    try:
        with override_settings(ENGRAM_DB_DEADLINES={**settings.ENGRAM_DB_DEADLINES, "api": api}):
            deadlines.use("api")  # the live server's sessions, as the web server's
            with memories_locked():
                result = call(live_api, acme, "get_memory", memory_id=memory_id)
    finally:
        deadlines.use("background")
    assert result.is_error
    assert "busy" in text(result) and "retry in 2 seconds" in text(result), text(result)
    assert "took longer than the server allows" in text(result)
    [warning] = [r for r in caplog.records if "database deadline exceeded" in r.getMessage()]
    assert (warning.levelname, warning.exc_info) == ("WARNING", None)
    assert "SQLSTATE 57014" in warning.getMessage()
    assert not [r for r in caplog.records if r.exc_info], "no traceback logged"
    assert [r.status for r in rows(acme) if r.action == "mcp:get_memory"] == [503]
