"""The OpenAI-compatible embedder, against a local fake embeddings server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from memory.text.embeddings import EmbeddingError, OpenAICompatibleEmbedder


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
    from memory.text import embeddings
    from tenants.db import project_context
    from tests.factory import auth, make_key

    FakeEmbeddings.status = 500
    monkeypatch.setattr(
        embeddings,
        "_active",
        (embeddings.configured_space(), OpenAICompatibleEmbedder(server, "m", None, 384)),
    )
    key = make_key()
    body = {"messages": "I like tea", "user_id": "alice", "infer": False}
    response = client.post(
        "/v3/memories/add/", body, content_type="application/json", headers=auth(key.raw)
    )
    assert response.status_code == 503
    assert "embedding service" in response.json()["detail"]
    with project_context(key.key.project_id):
        assert not Memory.objects.exists()


class RecordingEmbedder(OpenAICompatibleEmbedder):
    """The hosted embedder, noting whether a database transaction was open at each call."""

    calls: list[tuple[int, bool, bool]]

    def embed(self, texts: Any, max_tokens: int | None = None) -> Any:
        from django.db import connection
        from psycopg.pq import TransactionStatus

        raw = connection.connection
        in_transaction = raw is not None and raw.info.transaction_status != TransactionStatus.IDLE
        self.calls.append((len(texts), connection.in_atomic_block, in_transaction))
        return super().embed(texts, max_tokens)


def test_no_transaction_is_open_while_the_hosted_embedder_is_called(
    server: str, monkeypatch: pytest.MonkeyPatch, client: Any, committed_db: None
) -> None:
    """An HTTP call of up to 30 s must never hold a transaction (and its locks) open."""
    from memory.extraction.llm.offline import OfflineExtractor
    from memory.extraction.pipeline import process_event
    from memory.models import Memory, MemoryEvent
    from memory.text import embeddings
    from tenants.db import project_context
    from tests.factory import auth, make_key

    embedder = RecordingEmbedder(server, "m", None, 384)
    embedder.calls = []
    monkeypatch.setattr(embeddings, "_active", (embeddings.configured_space(), embedder))
    key = make_key()

    def call(method: str, path: str, body: Any) -> Any:
        response = getattr(client, method)(
            path, body, content_type="application/json", headers=auth(key.raw)
        )
        assert response.status_code < 300, (path, response.content)
        return response.json()

    added = call("post", "/v3/memories/add/", {"messages": "I like tea", "user_id": "alice",
                                                "infer": False})  # fmt: skip
    memory_id = added["results"][0]["id"]
    for path in ("/v3/memories/search/", "/v2/memories/search/", "/v1/memories/search/"):
        call("post", path, {"query": "tea", "filters": {"user_id": "alice"}})
    call("put", f"/v1/memories/{memory_id}/", {"text": "I like green tea"})
    call("put", "/v1/batch/", {"memories": [{"memory_id": memory_id, "text": "I like oolong"}]})
    with project_context(key.key.project_id):
        event = MemoryEvent.objects.create(
            project=key.key.project,
            payload={"messages": [{"role": "user", "content": "I love hiking."}],
                     "scope": {"user_id": "alice"}},
            user_id="alice",
        )  # fmt: skip
    process_event(event.id, key.key.project_id, OfflineExtractor())

    assert len(embedder.calls) >= 7  # add, 3 searches, PUT, batch, the event (and its apply)
    assert all(not atomic and not open_ for _, atomic, open_ in embedder.calls), embedder.calls
    with project_context(key.key.project_id):
        assert Memory.objects.filter(text="I like oolong").exists()
