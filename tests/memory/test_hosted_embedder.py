"""The OpenAI-compatible embedder, against a local fake embeddings server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from memory.retrieval.embeddings import EmbeddingError, OpenAICompatibleEmbedder


class FakeEmbeddings(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []
    dimensions = 384
    status = 200

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeEmbeddings.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), **body}
        )
        # Answer out of order, with unnormalised vectors, as real services may.
        data = [
            {"index": i, "embedding": [float(i + 1)] * self.dimensions}
            for i in reversed(range(len(body["input"])))
        ]
        payload = json.dumps({"data": data} if self.status == 200 else {"error": "boom"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    FakeEmbeddings.requests, FakeEmbeddings.dimensions, FakeEmbeddings.status = [], 384, 200
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeEmbeddings)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_it_embeds_through_the_service_in_input_order(server: str) -> None:
    embedder = OpenAICompatibleEmbedder(server, "text-embedding-3-small", "sk-test", 384)
    vectors = embedder.embed(["first", "second"])
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    request = FakeEmbeddings.requests[0]
    assert (request["path"], request["auth"], request["model"]) == (
        "/v1/embeddings",
        "Bearer sk-test",
        "text-embedding-3-small",
    )
    assert (request["input"], request["dimensions"]) == (["first", "second"], 384)


def test_it_refuses_vectors_of_the_wrong_size(server: str) -> None:
    FakeEmbeddings.dimensions = 1536
    with pytest.raises(EmbeddingError, match="expected"):
        OpenAICompatibleEmbedder(server, "m", None, 384).embed(["x"])


def test_it_reports_a_failing_service(server: str) -> None:
    FakeEmbeddings.status = 500
    with pytest.raises(EmbeddingError, match="failed"):
        OpenAICompatibleEmbedder(server, "m", None, 384).embed(["x"])


@pytest.mark.django_db
def test_it_answers_503_and_stores_nothing_when_the_service_fails(
    server: str, monkeypatch: pytest.MonkeyPatch, client: Any
) -> None:
    from memory.models import Memory
    from memory.retrieval import embeddings
    from tenants.db import project_context
    from tests.factory import auth, make_key

    FakeEmbeddings.status = 500
    monkeypatch.setattr(embeddings, "_embedder", OpenAICompatibleEmbedder(server, "m", None, 384))
    key = make_key()
    body = {"messages": "I like tea", "user_id": "alice", "infer": False}
    response = client.post(
        "/v3/memories/add/", body, content_type="application/json", headers=auth(key.raw)
    )
    assert response.status_code == 503
    assert "embedding service" in response.json()["detail"]
    with project_context(key.key.project_id):
        assert not Memory.objects.exists()
