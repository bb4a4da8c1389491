"""The engram-mcp stdio relay (memory/mcp/stdio.py) when the server fails: the script is driven
by the SDK's stdio client, as an MCP host drives it, and reaches the live server through a TCP
link the tests can cut and restore, so the same relay process sees the outage and the recovery.

Persona: acme/mcp's key (Alice's project), pinned to user alice.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import SocketAttribute, SocketStream, TaskGroup
from django.db import connections
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, CallToolResult

from memory.mcp.stdio import refusal
from tenants.actions import NewApiKey, do_revoke_api_key
from tests.factory import make_key

SCRIPT = shutil.which("engram-mcp", path=os.path.dirname(sys.executable))  # pyproject's script
# Guards against a relay that never answers: the test fails instead of hanging.
READ_TIMEOUT = 90


def environment(url: str, key: str, **extra: str) -> dict[str, str]:
    scope = {"ENGRAM_USER_ID": "alice"}
    return {"PATH": os.environ["PATH"], "ENGRAM_URL": url, "ENGRAM_API_KEY": key, **scope, **extra}


def relay(url: str, key: str) -> Client:
    assert SCRIPT is not None
    params = StdioServerParameters(command=SCRIPT, env=environment(url, key))
    return Client(params, read_timeout_seconds=READ_TIMEOUT)


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


@pytest.fixture
def acme(live_api: str) -> NewApiKey:
    return make_key("acme", "mcp")


PAGE = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
GATEWAY_PAGE = (
    b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE)
)


class Link:
    """A TCP forwarder to the live server on a port of its own. Unplugged, the port refuses
    connections and the open ones are cut; plugged back in, it listens on the same port.
    `mode` says what a new connection gets: "forward" (everything), "mute" (closed once the
    request arrives, unanswered), "cut" (closed after the response's headers, before its body)
    or "gateway" (a 502 page, as a reverse proxy in front of a stopped server answers).
    """

    def __init__(self, live_api: str) -> None:
        server = httpx2.URL(live_api)
        self.target = (server.host, server.port or 80)
        self.port = 0
        self.mode = "forward"
        self._unplugged: list[tuple[anyio.CancelScope, anyio.Event]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def plug(self, group: TaskGroup) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        # anyio's typed socket attributes, not Django's QuerySet.extra:
        self.port = listener.extra(SocketAttribute.local_port)  # noqa: S610
        scope, closed = anyio.CancelScope(), anyio.Event()
        self._unplugged.append((scope, closed))
        group.start_soon(self._serve, listener, scope, closed)

    async def unplug(self) -> None:
        scope, closed = self._unplugged.pop()
        scope.cancel()
        await closed.wait()

    async def _serve(self, listener: Any, scope: anyio.CancelScope, closed: anyio.Event) -> None:
        try:
            with scope:
                async with listener:
                    await listener.serve(self._forward)
        finally:
            closed.set()

    async def _forward(self, client: SocketStream) -> None:
        mode = self.mode
        if mode in ("mute", "gateway"):
            async with client:
                await client.receive()
                if mode == "gateway":
                    await client.send(GATEWAY_PAGE)
            return
        async with client:
            server = await anyio.connect_tcp(*self.target)
            async with server, anyio.create_task_group() as group:
                group.start_soon(_pump, client, server, False)
                group.start_soon(_pump, server, client, mode == "cut")


async def _pump(source: SocketStream, sink: SocketStream, cut_after_headers: bool) -> None:
    head = b""  # what has passed so far, while looking for the end of the headers
    try:
        async for chunk in source:
            if cut_after_headers and b"\r\n\r\n" in head + chunk:
                end = (head + chunk).index(b"\r\n\r\n") + 4 - len(head)
                await sink.send(chunk[:end])
                await sink.aclose()
                return
            head += chunk if cut_after_headers else b""
            await sink.send(chunk)
        await sink.send_eof()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        return  # the other side went away: nothing more to forward


def test_it_answers_every_call_while_the_server_is_unreachable_and_then_reconnects(
    live_api: str, acme: NewApiKey
) -> None:
    link = Link(live_api)
    search = ("search_memories", {"query": "bees"})

    async def work() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with anyio.create_task_group() as group:
            await link.plug(group)
            async with relay(link.url, acme.raw) as client:
                added = await client.call_tool(
                    "add_memory", {"text": "I keep bees", "infer": False}
                )
                assert not added.is_error, text(added)
                await link.unplug()
                seen["down"] = await client.call_tool(*search)
                with pytest.raises(MCPError) as listing:
                    await client.list_tools()
                seen["listing"] = listing.value.error.message
                await link.plug(group)
                for mode in ("mute", "cut", "gateway"):
                    link.mode = mode
                    seen[mode] = await client.call_tool(*search)
                link.mode = "forward"
                seen["back"] = await client.call_tool(*search)
                seen["tools"] = await client.list_tools()
            group.cancel_scope.cancel()
        return seen

    seen = anyio.run(work)
    down = text(seen["down"])
    assert seen["down"].is_error and f"cannot reach engram at {link.url}/mcp/" in down
    assert "ConnectError" in down and "the request was not sent" in down
    assert "cannot reach engram" in seen["listing"]
    for mode in ("mute", "cut"):
        assert seen[mode].is_error and "lost the connection" in text(seen[mode]), mode
        assert "may or may not have been applied" in text(seen[mode])
    assert seen["gateway"].is_error and "answered HTTP 502: Bad Gateway" in text(seen["gateway"])
    assert not seen["back"].is_error, text(seen["back"])
    assert [r["memory"] for r in seen["back"].structured_content["results"]] == ["I keep bees"]
    assert "search_memories" in {t.name for t in seen["tools"].tools}


def revoke(key: NewApiKey) -> None:
    try:
        do_revoke_api_key(key.key)
    finally:
        connections.close_all()  # this worker thread's connection, or the test database stays busy


def test_a_key_revoked_mid_session_gets_the_servers_reason(live_api: str, acme: NewApiKey) -> None:
    async def work() -> tuple[CallToolResult, CallToolResult, str]:
        async with relay(live_api, acme.raw) as client:
            before = await client.call_tool("list_entities", {})
            await anyio.to_thread.run_sync(revoke, acme)
            after = await client.call_tool("list_entities", {})
            with pytest.raises(MCPError) as listing:
                await client.list_tools()
            return before, after, listing.value.error.message

    before, after, listing = anyio.run(work)
    assert not before.is_error, text(before)
    assert after.is_error and "This API key has been revoked." in text(after)
    assert "HTTP 401" in text(after)
    assert "This API key has been revoked." in listing


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: connections to it are refused


def test_it_refuses_to_start_with_one_line_on_stderr(live_api: str, acme: NewApiKey) -> None:
    assert SCRIPT is not None
    cases = [
        (environment(live_api, "eng_" + "x" * 40), "Invalid API key."),
        (environment(f"http://127.0.0.1:{closed_port()}", acme.raw), "cannot reach engram"),
        (environment(live_api, ""), "set ENGRAM_API_KEY"),
        (environment(live_api, "", ENGRAM_API_KEY_FILE="/nonexistent/key"), "cannot be read"),
    ]
    for env, reason in cases:
        run = subprocess.run(
            [SCRIPT], check=False, env=env, input=b"", capture_output=True, timeout=120
        )
        lines = run.stderr.decode().splitlines()
        assert run.returncode == 1, (reason, run.stderr)
        assert len(lines) == 1 and lines[0].startswith("engram-mcp: "), (reason, run.stderr)
        assert reason in lines[0], (reason, run.stderr)


def test_a_refusal_keeps_the_servers_reason_code_and_data() -> None:
    request = httpx2.Request("POST", "http://engram.test/mcp/")
    drf = httpx2.Response(401, json={"detail": "This API key has been revoked."}, request=request)
    version = {"code": -32022, "message": "Unsupported protocol version", "data": {"v": ["x"]}}
    sdk = httpx2.Response(400, json={"jsonrpc": "2.0", "id": 1, "error": version}, request=request)
    page = httpx2.Response(503, html="<h1>down</h1>", request=request)

    answered = "engram at http://engram.test/mcp/ answered HTTP"
    revoked = f"{answered} 401: This API key has been revoked."
    assert refusal(drf) == {"code": INTERNAL_ERROR, "message": revoked}
    assert refusal(sdk) == {**version, "message": f"{answered} 400: Unsupported protocol version"}
    assert refusal(page)["message"] == f"{answered} 503: Service Unavailable"
