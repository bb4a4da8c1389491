"""`engram-mcp`: engram's MCP tools over stdio, for hosts that only launch a local command.

It defines no tool of its own: it relays tools/list and tools/call to an engram server's
/mcp/ endpoint with the SDK's streamable-HTTP client, so the tools have one definition
(memory.mcp.tools) and the server checks the key, applies the fixed scope and writes the
access log as for any MCP client. Configured by the environment:

    ENGRAM_URL        the server (default http://127.0.0.1:8000); /mcp/ is added unless given
    ENGRAM_API_KEY    an API key of the project (or ENGRAM_API_KEY_FILE)
    ENGRAM_USER_ID    optional: fix the user (also ENGRAM_AGENT_ID, ENGRAM_APP_ID, ENGRAM_RUN_ID)

Nothing here loads Django: it runs on the user's machine, next to the MCP host.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult

from config.env import env_optional, env_secret, env_str
from memory.mcp.headers import SCOPE_HEADERS

DEFAULT_URL = "http://127.0.0.1:8000"
# Generous: an add with infer=false embeds its text; a search embeds the query.
TIMEOUT_SECONDS = 60


def endpoint(url: str) -> str:
    """The MCP endpoint of an engram URL (the server's root, or its /mcp/ already)."""
    url = url.rstrip("/")
    return url + "/" if url.endswith("/mcp") else url + "/mcp/"


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


def relay(remote: Client) -> Server[Any]:
    """A stdio-side server whose tools are the remote server's, called there."""

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return await remote.list_tools()

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        return await remote.call_tool(params.name, params.arguments or {})

    return Server("engram", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(url: str, headers: dict[str, str]) -> None:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=TIMEOUT_SECONDS) as http,
        Client(streamable_http_client(url, http_client=http)) as remote,
        stdio_server() as (read_stream, write_stream),
    ):
        server = relay(remote)
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    url = endpoint(env_str("ENGRAM_URL", DEFAULT_URL))
    headers = connection_headers()
    try:
        anyio.run(serve, url, headers)
    except KeyboardInterrupt:
        sys.exit(130)
