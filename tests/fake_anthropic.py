"""A local fake of the model APIs, scripted per test, for the real SDKs: Anthropic's Messages API
(POST /v1/messages, the `anthropic` SDK) and OpenAI's Chat Completions (POST
/v1/chat/completions, the `openai` SDK, as OpenAI, Ollama, vLLM or LM Studio serve it).

Each request takes the next scripted reply: a tool input (answered as a `tool_use` block of the
tool the request forces, or as a function call, or as the JSON text of a structured-output
reply), an HTTP error, or a delay before the reply; a reply may end otherwise (cut off at
max_tokens, a refusal, prose without the tool call) and report prompt-cache usage. Every
request is recorded with its body and, for either API, the tool it forces (`tool`), its user
turn (`prompt`) and its system prompt (`system`) as text.

Chat Completions endpoints differ, and the fake can play the awkward ones: one that refuses
tools (`rejects_tools`: a 400 for any request with tools), one that ignores both tools and
`response_format` (`ignores_format`: the answer comes as the message's text), and one that takes
the output budget as `max_completion_tokens` only (`completion_tokens_only`).

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
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.local_server import serving


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
    # Chat Completions only: the function call's arguments (or the text answered) exactly as
    # given, instead of the tool input as JSON (a malformed reply).
    raw: str | None = None


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
    # Chat Completions endpoints that do not do what is asked (see the module's docstring).
    rejects_tools: bool = False
    ignores_format: bool = False
    # As OpenAI's reasoning models: a 400 for max_tokens (max_completion_tokens only).
    completion_tokens_only: bool = False

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
            chat = self.path.rstrip("/").endswith("/chat/completions")
            tool = tool_of(body)
            fake.requests.append({
                "path": self.path, "headers": dict(self.headers), "body": body, "tool": tool,
                "prompt": prompt_of(body), "system": system_of(body),
            })  # fmt: skip
            if chat and fake.rejects_tools and body.get("tools"):
                error = {"message": "tools are not supported", "type": "invalid_request_error"}
                return self._send(400, {"error": error})
            if chat and fake.completion_tokens_only and "max_tokens" in body:
                error = {"message": "Unsupported parameter: 'max_tokens' is not supported with "
                         "this model. Use 'max_completion_tokens' instead.",
                         "type": "invalid_request_error"}  # fmt: skip
                return self._send(400, {"error": error})
            with fake.lock:
                reply = fake._next(tool)
            time.sleep(reply.delay)
            tool_input = reply.respond(body) if reply.respond else reply.tool_input
            if reply.status != 200:
                if chat:
                    error = {"message": "scripted failure", "type": reply.error_type}
                    return self._send(reply.status, {"error": error}, reply.headers)
                error = {"type": reply.error_type, "message": "scripted failure"}
                return self._send(reply.status, {"type": "error", "error": error}, reply.headers)
            if chat:
                return self._send(200, chat_reply(fake, body, tool, tool_input or {}, reply))
            content: list[dict[str, Any]] = [
                {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": tool,
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


def tool_of(body: dict[str, Any]) -> str | None:
    """The tool a request forces: Messages API, Chat Completions tools or structured output."""
    choice = body.get("tool_choice") or {}
    if "function" in choice:
        return str(choice["function"]["name"])
    if choice.get("name"):
        return str(choice["name"])
    schema = (body.get("response_format") or {}).get("json_schema") or {}
    return schema.get("name")


def prompt_of(body: dict[str, Any]) -> str:
    """A request's user turn as text (its text blocks or parts joined), for either API."""
    message: dict[str, Any] = next(
        (m for m in body.get("messages") or [] if m.get("role") == "user"), {}
    )
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")


def system_of(body: dict[str, Any]) -> str:
    """A request's system prompt as text (its blocks joined), for either API."""
    system = body.get("system")
    if system is None:
        message: dict[str, Any] = next(
            (m for m in body.get("messages") or [] if m.get("role") == "system"), {}
        )
        system = message.get("content", "")
    if isinstance(system, str):
        return system
    return "\n\n".join(block.get("text", "") for block in system)


def chat_reply(
    fake: FakeClaude,
    body: dict[str, Any],
    tool: str | None,
    tool_input: dict[str, Any],
    reply: Reply,
) -> dict[str, Any]:
    """A Chat Completions answer: `tool_input` as the forced function call's arguments, or as
    the message's text for structured output (or for a server that ignores both)."""
    answer = reply.raw if reply.raw is not None else json.dumps(tool_input)
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    finish = "stop"
    if reply.stop_reason == "max_tokens":
        answer, finish = answer[: len(answer) // 2], "length"
    if reply.stop_reason == "refusal":
        message["refusal"] = "I can't help with that."
    elif reply.stop_reason == "end_turn":
        message["content"] = "I would rather answer in prose."
    elif body.get("tools") and not fake.ignores_format:
        call = {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                "function": {"name": tool, "arguments": answer}}  # fmt: skip
        message["tool_calls"] = [call]
        finish = "tool_calls" if finish == "stop" else finish
    else:
        message["content"] = answer
    cached = reply.cache[1]
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": 0,
        "model": body.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": reply.usage[0] + cached, "completion_tokens": reply.usage[1],
                  "total_tokens": sum(reply.usage) + cached,
                  "prompt_tokens_details": {"cached_tokens": cached}},
    }  # fmt: skip


@pytest.fixture
def fake_claude() -> Iterator[FakeClaude]:
    fake = FakeClaude()
    with serving(_handler(fake)) as port:
        fake.url = f"http://127.0.0.1:{port}"
        yield fake
