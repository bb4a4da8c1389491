"""`engram-mcp`: engram's MCP tools over stdio, for hosts that only launch a local command.

It defines no tool of its own: it relays tools/list and tools/call to an engram server's
/mcp/ endpoint with the SDK's streamable-HTTP client, so the tools have one definition
(memory.mcp.tools) and the server checks the key, applies the fixed scope and writes the
access log as for any MCP client. Configured by the environment:

    ENGRAM_URL        the server (default http://127.0.0.1:8000); /mcp/ is added unless given
    ENGRAM_API_KEY    an API key of the project (or ENGRAM_API_KEY_FILE)
    ENGRAM_USER_ID    optional: fix the user (also ENGRAM_AGENT_ID, ENGRAM_APP_ID, ENGRAM_RUN_ID)

Failures: if the server cannot be reached or refuses the key at start-up, the script prints one
line to stderr and exits with status 1 (the host shows the server as failed, with that line).
Once started, every call is answered: a call the server could not take becomes a tool error
saying why (unreachable, connection lost, or the server's own refusal, e.g. a revoked key), and
tools/list a JSON-RPC error. The server is stateless, so the next call simply connects again.

Nothing here loads Django: it runs on the user's machine, next to the MCP host.
"""

from __future__ import annotations

import json
import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx2
from django.core.exceptions import ImproperlyConfigured
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    TextContent,
)

from config.env import env_optional, env_secret, env_str
from memory.mcp.headers import SCOPE_HEADERS

DEFAULT_URL = "http://127.0.0.1:8000"
# Generous: an add with infer=false embeds its text; a search embeds the query.
TIMEOUT_SECONDS = 60
# A server that is down usually refuses at once; this bounds one that drops packets instead.
CONNECT_TIMEOUT_SECONDS = 10
# Failures before the request left this machine: the server cannot have run it.
NOT_SENT = (
    httpx2.ConnectError,
    httpx2.ConnectTimeout,
    httpx2.PoolTimeout,
    httpx2.UnsupportedProtocol,
    httpx2.ProxyError,
)


class StartupError(Exception):
    """The relay cannot start: a bad setting, or the server unreachable or refusing the key."""


def endpoint(url: str) -> str:
    """The MCP endpoint of an engram URL (the server's root, or its /mcp/ already)."""
    url = url.rstrip("/")
    return url + "/" if url.endswith("/mcp") else url + "/mcp/"


def server_endpoint() -> str:
    """The MCP endpoint of ENGRAM_URL, which must be an http(s) URL."""
    url = env_str("ENGRAM_URL", DEFAULT_URL)
    if not url.lower().startswith(("http://", "https://")):
        raise StartupError(f"ENGRAM_URL={url!r} must start with http:// or https://.")
    return str(httpx2.URL(endpoint(url)))  # raises InvalidURL now rather than on each call


def connection_headers() -> dict[str, str]:
    """The key and fixed scope ids, from the environment."""
    key = env_secret("ENGRAM_API_KEY")
    if not key:
        raise SystemExit("engram-mcp: set ENGRAM_API_KEY (an engram API key).")
    headers = {"Authorization": f"Token {key}"}
    for field, header in SCOPE_HEADERS.items():
        value = env_optional(f"ENGRAM_{field.upper()}")
        if value:
            headers[header] = value
    return headers


class AnsweringClient(httpx2.AsyncClient):
    """An HTTP client that turns every failed exchange with the server into a JSON-RPC error.

    The SDK's streamable-HTTP transport lets a network error (refused, reset, timed out) escape
    the task that posted the request: that ends the transport's task group, so the call is
    never answered and the relay exits. It also replaces an error status whose body is not a
    JSON-RPC error (DRF's 401 `{"detail": "This API key has been revoked."}`, a proxy's 502
    page) with "Server returned an error response". But an error status with a JSON-RPC error
    body it hands to the waiting call, error and all; so this client answers every failure with
    one, naming the server, the HTTP status and the server's own reason. Nothing else needs
    restoring afterwards: the server is stateless and the connection pool opens a new
    connection on the next call.
    """

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        try:
            response = await super().send(request, **kwargs)
        except httpx2.RequestError as error:
            return unanswered(request, error)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response  # the SDK reads an event stream itself and answers its failures
        try:
            # Read here, not in the SDK: a connection lost mid-body would escape it too.
            await response.aread()
        except httpx2.RequestError as error:
            await response.aclose()
            return unanswered(request, error)
        if response.status_code >= 400:
            return json_rpc_error(request, response.status_code, refusal(response))
        return response


def json_rpc_error(request: httpx2.Request, status: int, error: dict[str, Any]) -> httpx2.Response:
    """An HTTP answer to `request` carrying a JSON-RPC error for the message it posted."""
    try:
        posted = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        posted = None
    message_id = posted.get("id") if isinstance(posted, dict) else None
    return httpx2.Response(
        status, json={"jsonrpc": "2.0", "id": message_id, "error": error}, request=request
    )


def unanswered(request: httpx2.Request, error: httpx2.RequestError) -> httpx2.Response:
    """A 502 saying what became of `request` (any error status leads the SDK to read the body's
    JSON-RPC error)."""
    return json_rpc_error(request, 502, {"code": INTERNAL_ERROR, "message": lost(request, error)})


def lost(request: httpx2.Request, error: httpx2.RequestError) -> str:
    """What became of a request the server did not answer, and why."""
    reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    server = f"engram at {request.url}"
    if isinstance(error, NOT_SENT):
        return f"cannot reach {server} ({reason}); the request was not sent."
    if isinstance(error, httpx2.TimeoutException):
        failure = f"no answer from {server} within {TIMEOUT_SECONDS} s ({reason})"
    elif isinstance(error, httpx2.TransportError):
        failure = f"lost the connection to {server} before it answered ({reason})"
    else:  # an answer that could not be decoded
        failure = f"no usable answer from {server} ({reason})"
    return failure + "; the request may or may not have been applied."


def refusal(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC error for an error status: its message names the server and the status, then
    the server's reason (DRF's `detail`, or its JSON-RPC error's message), else the status's
    phrase. A JSON-RPC error's code and data are kept: the SDK's version negotiation reads them.
    """
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    body = body if isinstance(body, dict) else {}
    error = body["error"] if isinstance(body.get("error"), dict) else {}
    reasons = (body.get("detail"), error.get("message"), response.reason_phrase)
    reason = next((r for r in reasons if isinstance(r, str) and r), "")
    code, status = error.get("code"), response.status_code
    return {
        **error,
        "code": code if isinstance(code, int) else INTERNAL_ERROR,
        "message": f"engram at {response.request.url} answered HTTP {status}: {reason}",
    }


def relay(remote: Client) -> Server[Any]:
    """A stdio-side server whose tools are the remote server's, called there."""

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return await remote.list_tools()  # an MCPError reaches the host as a JSON-RPC error

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        try:
            return await remote.call_tool(params.name, params.arguments or {})
        except MCPError as error:
            # A tool error rather than a JSON-RPC one: hosts show it to the model, which can
            # then tell the user that memory is unavailable, and why.
            text = TextContent(type="text", text=error.message)
            return CallToolResult(content=[text], is_error=True)

    return Server("engram", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(url: str, headers: dict[str, str]) -> None:
    timeout = httpx2.Timeout(TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(AnsweringClient(headers=headers, timeout=timeout))
        try:
            remote = await stack.enter_async_context(
                Client(streamable_http_client(url, http_client=http))
            )
        except* MCPError as failed:
            raise StartupError(first_message(failed)) from None
        read_stream, write_stream = await stack.enter_async_context(stdio_server())
        server = relay(remote)
        await server.run(read_stream, write_stream, server.create_initialization_options())


def first_message(group: BaseExceptionGroup[MCPError]) -> str:
    error = group.exceptions[0]
    return first_message(error) if isinstance(error, BaseExceptionGroup) else error.message


def main() -> None:
    try:
        url = server_endpoint()
        headers = connection_headers()
        anyio.run(serve, url, headers)
    except KeyboardInterrupt:
        sys.exit(130)
    except (StartupError, ImproperlyConfigured, httpx2.InvalidURL) as error:
        # One line: hosts show a server's stderr in their logs, and its last line in their UI.
        sys.exit("engram-mcp: cannot start: " + " ".join(str(error).split()))
