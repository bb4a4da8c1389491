"""A local fake of a reranker service (POST /rerank) in both shapes engram speaks: Cohere's
(`{"model", "query", "documents", "top_n"}` answered `{"results": [{"index",
"relevance_score"}], "usage": {"total_tokens"}}`, as Cohere, Jina, vLLM, llama.cpp's server,
Infinity and LiteLLM serve it) and text-embeddings-inference's (`{"query", "texts"}` answered
`[{"index", "score"}]`), told apart by the request's body as a real server of each would.

It ranks the documents in reverse (the last first), so a reranked answer is easy to tell from
the fused one, and can misbehave on demand (`mode`): "slow" (sleeps `delay` first; `delay` also
slows the other modes), "error" (a 500), "malformed" (a body that is not JSON),
"out_of_range" (an index past the documents), "duplicate" (one index twice). Every request is
recorded, with whether the test's own database connection (`watch`) was inside a transaction
while it was made: a reranker must be called after the search's transaction has closed.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.local_server import serving


@dataclass
class FakeReranker:
    url: str = ""
    mode: str = "reversed"
    delay: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    # A database connection (the test thread's) to look at while a request is being answered.
    watch: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ranking(self, count: int) -> list[tuple[int, float]]:
        """The documents' indices, the last first, each with its score (best first)."""
        ranked = [(index, round((index + 1) / count, 6)) for index in reversed(range(count))]
        if self.mode == "out_of_range":
            ranked[0] = (count, 1.0)
        if self.mode == "duplicate" and count > 1:
            ranked[1] = (ranked[0][0], ranked[1][1])
        return ranked


def _handler(fake: FakeReranker) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            watch = fake.watch
            with fake.lock:
                fake.requests.append({
                    "path": self.path, "headers": dict(self.headers), "body": body,
                    "in_atomic_block": watch.in_atomic_block if watch is not None else None,
                    "atomic_depth": len(watch.atomic_blocks) if watch is not None else None,
                })  # fmt: skip
            time.sleep(fake.delay)
            if self.path.rstrip("/") != "/rerank":
                return self._send(404, b'{"error": "not found"}')
            if fake.mode == "error":
                return self._send(500, b'{"error": "scripted failure"}')
            if fake.mode == "malformed":
                return self._send(200, b'{"results": [{"index": 0, "relevance_')
            tei = "texts" in body
            documents = body.get("texts" if tei else "documents") or []
            ranked = fake.ranking(len(documents))
            if tei:
                reply: Any = [{"index": i, "score": s} for i, s in ranked]
            else:
                results = [{"index": i, "relevance_score": s} for i, s in ranked]
                tokens = sum(len(d.split()) for d in documents)
                reply = {"results": results[: body.get("top_n") or len(results)],
                         "usage": {"total_tokens": tokens}}  # fmt: skip
            self._send(200, json.dumps(reply).encode())

        def _send(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            # The client may have given up (its deadline) and gone away.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def running(fake: FakeReranker) -> Iterator[FakeReranker]:
    """Serve `fake` for the block (its `url` set), for the tests and bench/rerank.py."""
    with serving(_handler(fake)) as port:
        fake.url = f"http://127.0.0.1:{port}"
        yield fake


@pytest.fixture
def fake_rerank() -> Iterator[FakeReranker]:
    with running(FakeReranker()) as fake:
        yield fake
