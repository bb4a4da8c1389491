"""The streamable-HTTP MCP endpoint, /mcp/: a DRF view that hands the exchange to the SDK.

Why a view and not a second (ASGI) server: the SDK's transport is an ASGI app, but every
request of the stateless, JSON-response mode is one self-contained HTTP exchange, which fits
gunicorn's synchronous workers as any API call does. So the API key is checked, throttled and
refused (401 JSON) by DRF exactly as for the REST API; then the request is given to the SDK's
StreamableHTTPSessionManager as an ASGI scope, through asgiref's async_to_sync, and the tools
run back in this thread (memory.mcp.tools). No other process, port or event-loop thread.

Each exchange leaves one access-log row: a tool call's is written in its tenant transaction
(with its scope and result count); the others' (initialize, tools/list, refused keys, refused
tool calls) here, once the response is known, with the tool's REST status when it refused.
A request refused before this view (an oversized body, NUL in the URL) or failing inside it
gets its row from the access-log middleware (audit.middleware), as a REST request does.

Every HTTP refusal on /mcp/, whoever made it (the SDK, DRF, a middleware, the 500 handler), has
one shape, McpRefusalMiddleware's: a JSON-RPC error, which MCP clients show to their user, with
the API's `detail` beside it, `{"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
"message": "<detail>"}, "detail": "<detail>"}`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from asgiref.sync import async_to_sync
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.access import access_record, authenticated_key, write_row
from memory.mcp.scope import fixed_scope
from memory.mcp.tools import CALLER, Caller, server
from tenants.db import project_context

logger = logging.getLogger(__name__)

Message = dict[str, Any]
# Hop-by-hop and framing headers: the WSGI server sets its own.
_NOT_COPIED = {"content-length", "connection", "transfer-encoding"}
# JSON-RPC 2.0's codes for a refusal that carries none of its own (the SDK's keep theirs).
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
DETAIL_CHARS = 1000


class _SdkNegotiates(BaseContentNegotiation):
    """The SDK checks Accept itself (and answers the MCP spec's 406); DRF must not first."""

    def select_parser(self, request: Request, parsers: Any) -> Any:
        return None

    def select_renderer(self, request: Request, renderers: Any, format_suffix: Any = None) -> Any:
        return (renderers[0], renderers[0].media_type)


class McpView(APIView):
    parser_classes: list[Any] = []  # the SDK reads the JSON-RPC body itself
    schema = None  # not a REST operation: absent from the OpenAPI schema
    content_negotiation_class = _SdkNegotiates

    # POST only. GET would open the transport's server-to-client event stream, which this
    # stateless endpoint never writes to and which would hold a worker for as long as the client
    # waits; DELETE ends a session, and there are none. Both are DRF's JSON 405 (Allow: POST),
    # as the MCP spec lets a server without that stream answer.
    def post(self, request: Request) -> HttpResponse:
        return exchange(request)

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        # Every answer passes here: the SDK's, and DRF's refusals (401, 429) made before it.
        response = super().finalize_response(request, response, *args, **kwargs)
        record = access_record(request)
        if record.logged is None:
            log_exchange(request, outcome(request, response) or response.status_code)
        # This response has its row (a tool's carries the tool's REST status, not 200): the
        # access-log middleware adds one only if the exchange ends otherwise.
        record.logged = response.status_code
        return response


def outcome(request: Request, response: HttpResponseBase) -> int | None:
    """For a tool call, the status its outcome has in the REST API (400 if the SDK refused it,
    e.g. an unknown tool or arguments of the wrong type); None for other messages."""
    caller: Caller | None = request._request.__dict__.get("_engram_mcp_caller")
    if caller is None or not isinstance(response, HttpResponse):
        return None
    try:
        result = json.loads(response.content).get("result") or {}
    except (ValueError, AttributeError):
        return None
    if result.get("isError"):
        return caller.status if caller.status != 200 else 400
    return None


def log_exchange(request: Request, status: int) -> None:
    """Write the exchange's access-log row in a transaction of its own (as the middleware does
    for the REST API's refused requests)."""
    key = authenticated_key(request)
    try:
        with project_context(key.project_id if key is not None else None):
            write_row(request, status)
    except DatabaseError:
        logger.exception("access log write failed")


def exchange(request: Request) -> HttpResponse:
    """One HTTP exchange through the SDK, with the caller (and its fixed scope) in context."""
    caller = Caller(request=request, fixed=fixed_scope(request._request))
    request._request.__dict__["_engram_mcp_caller"] = caller
    record = access_record(request)
    record.action = "mcp:" + json_rpc_method(request.body)
    token = CALLER.set(caller)
    try:
        status, headers, body = async_to_sync(serve)(asgi_scope(request), request.body)
    finally:
        CALLER.reset(token)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        if name.lower() not in _NOT_COPIED:
            response[name] = value
    return response


def json_rpc_method(body: bytes) -> str:
    """What the access log calls the exchange: its JSON-RPC method, or for tools/call the
    tool's name. The SDK parses and validates the body; this only peeks."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):  # nested deeper than the interpreter's stack
        return "invalid"
    if not isinstance(message, dict):
        return "invalid"
    method, params = message.get("method"), message.get("params")
    if method == "tools/call" and isinstance(params, dict) and isinstance(params.get("name"), str):
        return str(params["name"])
    return method if isinstance(method, str) else "response"


def asgi_scope(request: Request) -> dict[str, Any]:
    django_request = request._request
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": django_request.method,
        "scheme": django_request.scheme,
        "path": django_request.path,
        "raw_path": django_request.path.encode(),
        "query_string": django_request.META.get("QUERY_STRING", "").encode("latin-1"),
        "root_path": "",
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in django_request.headers.items()
        ],
        "client": (django_request.META.get("REMOTE_ADDR", ""), 0),
        "server": (django_request.get_host(), 0),
    }


async def serve(scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run one request through a fresh stateless, JSON-response session manager."""
    sent: list[Message] = []
    done = anyio.Event()
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the client "disconnects" once the response is complete
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    manager = StreamableHTTPSessionManager(
        app=server._lowlevel_server,  # the MCPServer's protocol server (tools, initialize)
        json_response=True,
        stateless=True,
    )
    async with manager.run():
        handle: Callable[..., Awaitable[None]] = manager.handle_request
        await handle(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start.get("headers", [])]
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], headers, content


def is_mcp_path(path: str) -> bool:
    return path == "/mcp" or path.startswith("/mcp/")


class McpRefusalMiddleware:
    """Give every HTTP refusal (4xx, 5xx) on /mcp/ the endpoint's one shape (module doc).

    The SDK answers some with a JSON-RPC error and no `detail`, one (a POST that is not
    application/json) with plain text; DRF, the middlewares and the error handlers answer
    `{"detail"}`. Placed outside the middlewares that refuse requests, so it sees all of them.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        refused = response.status_code >= 400 and is_mcp_path(request.path_info)
        if refused and isinstance(response, HttpResponse):  # not a streaming response
            refusal_shape(response)
        return response


def refusal_shape(response: HttpResponse) -> None:
    """Rewrite `response`'s body as a JSON-RPC error with `detail` (the module doc's shape)."""
    try:
        parsed = json.loads(response.content)
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict):
        body: dict[str, Any] = parsed
    else:  # the SDK's plain-text refusal
        body = {"detail": response.content.decode("utf-8", "replace").strip()}
    error = body.get("error")
    if not isinstance(error, dict):
        error = {}
    detail = str(body.get("detail") or error.get("message") or response.reason_phrase)
    detail = detail[:DETAIL_CHARS]
    code = error.get("code")
    if not isinstance(code, int):
        code = INTERNAL_ERROR if response.status_code >= 500 else INVALID_REQUEST
    request_id = body.get("id") if isinstance(body.get("id"), str | int) else None
    shaped = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {**error, "code": code, "message": detail},
        "detail": detail,
    }
    response.content = json.dumps({**shaped, **{k: v for k, v in body.items() if k not in shaped}})
    response["Content-Type"] = "application/json"
    if response.has_header("Content-Length"):  # set by CommonMiddleware, inside this one
        response["Content-Length"] = str(len(response.content))
