"""A local fake of Anthropic's Messages API, scripted per test, for the real `anthropic` SDK.

Each POST /v1/messages takes the next scripted reply: a tool input (answered as a `tool_use`
block of the tool the request forces), an HTTP error, or a delay before the reply; a reply may
end otherwise (cut off at max_tokens, a refusal, prose without the tool call) and report
prompt-cache usage.

The graph calls of extraction (record_entities, record_relations, record_contradictions) take
only replies scripted for their tool (`Reply(tool=...)`), and otherwise get an empty answer, so a
test about facts scripts only the fact calls; `graph_defaults=False` makes them take the script
like any other call.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Reply:
    tool_input: dict[str, Any] | None = None
    # Or compute the tool input from the request body (when several clients share the fake).
    respond: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    repeat: bool = False  # stay at the head of the script
    status: int = 200
    error_type: str = "api_error"
    delay: float = 0.0
    usage: tuple[int, int] = (120, 40)
    headers: dict[str, str] = field(default_factory=dict)  # e.g. {"retry-after": "3600"}
    tool: str | None = None  # only for a request forcing this tool
    # How the reply ends: "tool_use"; "max_tokens" (cut off: the tool input is partial),
    # "refusal" (no content), or "end_turn" with a text block and no tool call.
    stop_reason: str = "tool_use"
    cache: tuple[int, int] = (0, 0)  # cache_creation_input_tokens, cache_read_input_tokens


GRAPH_DEFAULTS: dict[str, dict[str, Any]] = {
    "record_entities": {"entities": []},
    "record_relations": {"relations": []},
    "record_contradictions": {"contradicted": []},
}


@dataclass
class FakeClaude:
    url: str = ""
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    graph_defaults: bool = True
    # A model API that is down for a while: while this returns a reply, every call (graph
    # calls too) gets that reply and the script waits.
    outage: Callable[[], Reply | None] | None = None

    def _next(self, tool: str | None) -> Reply:
        """The reply for a request forcing `tool` (called under the lock)."""
        if self.outage is not None and (down := self.outage()) is not None:
            return down
        if self.graph_defaults and tool in GRAPH_DEFAULTS:
            for index, reply in enumerate(self.replies):
                if reply.tool == tool:
                    return reply if reply.repeat else self.replies.pop(index)
            return Reply(GRAPH_DEFAULTS[tool], usage=(0, 0))
        # Any other call takes the first reply not scripted for another tool.
        for index, reply in enumerate(self.replies):
            if reply.tool is None or reply.tool == tool:
                return reply if reply.repeat else self.replies.pop(index)
        return Reply(status=500)

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)


def _handler(fake: FakeClaude) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes; without this, Nagle's algorithm and the
        # client's delayed ACK add tens of milliseconds to every reply.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            with fake.lock:
                reply = fake._next((body.get("tool_choice") or {}).get("name"))
            time.sleep(reply.delay)
            if reply.status != 200:
                error = {"type": reply.error_type, "message": "scripted failure"}
                return self._send(reply.status, {"type": "error", "error": error}, reply.headers)
            name = (body.get("tool_choice") or {}).get("name")
            tool_input = reply.respond(body) if reply.respond else reply.tool_input
            content: list[dict[str, Any]] = [
                {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": name,
                 "input": tool_input or {}}
            ]  # fmt: skip
            if reply.stop_reason == "refusal":
                content = []
            elif reply.stop_reason == "end_turn":
                content = [{"type": "text", "text": "I would rather answer in prose."}]
            self._send(200, {
                "id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant",
                "model": body.get("model"), "content": content, "stop_reason": reply.stop_reason,
                "stop_sequence": None,
                "usage": {"input_tokens": reply.usage[0], "output_tokens": reply.usage[1],
                          "cache_creation_input_tokens": reply.cache[0],
                          "cache_read_input_tokens": reply.cache[1]},
            })  # fmt: skip

        def _send(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            # The client may have timed out and gone away.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def fake_claude() -> Iterator[FakeClaude]:
    fake = FakeClaude()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()
