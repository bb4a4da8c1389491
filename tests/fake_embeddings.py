"""A local fake of an OpenAI-compatible embeddings API (POST /v1/embeddings) of any dimension,
768 by default (the size of nomic-embed-text, e5-base, bge-base), for the real embedder client.

Its vectors are deterministic and mean something: each lower-cased word is hashed into one of
the dimensions (feature hashing), so texts sharing words are near and others far, and a text's
vector is the same on every call (`vector`, normalised; the answers are not, and come out of
order, as real services' may). A test may make it fail (`fail_after`: that many requests
succeed, then every one answers 500), change its size, and read what it was sent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np
import pytest

from tests.local_server import serving

WORD = re.compile(r"\w+")


@dataclass
class FakeEmbeddings:
    url: str = ""
    dimensions: int = 768
    fail_after: int | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)

    def vector(self, text: str) -> list[float]:
        out = np.zeros(self.dimensions, dtype=np.float64)
        for word in WORD.findall(text.lower()) or [""]:
            digest = hashlib.sha256(word.encode()).digest()
            out[int.from_bytes(digest[:4], "big") % self.dimensions] += 1.0
            out[int.from_bytes(digest[4:8], "big") % self.dimensions] += 0.5
        return [float(x) for x in out / np.linalg.norm(out)]


def _handler(fake: FakeEmbeddings) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append(
                {**body, "path": self.path, "auth": self.headers.get("Authorization")}
            )
            failing = fake.fail_after is not None and len(fake.requests) > fake.fail_after
            if failing or self.path.rstrip("/") != "/v1/embeddings":
                payload: dict[str, Any] = {"error": {"message": "scripted failure"}}
                return self._send(500 if failing else 404, payload)
            # Out of order and not normalised, as real services may answer.
            data = [
                {"object": "embedding", "index": i,
                 "embedding": [3.0 * x for x in fake.vector(text)]}
                for i, text in reversed(list(enumerate(body["input"])))
            ]  # fmt: skip
            self._send(200, {"object": "list", "data": data, "model": body.get("model")})

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def fake_embeddings() -> Iterator[FakeEmbeddings]:
    fake = FakeEmbeddings()
    with serving(_handler(fake)) as port:
        fake.url = f"http://127.0.0.1:{port}/v1"
        yield fake
