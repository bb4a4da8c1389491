"""The OpenAI-compatible embedder, against the local fake embeddings API (tests.fake_embeddings)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memory.text.embeddings import EmbeddingError, OpenAICompatibleEmbedder
from tests.fake_embeddings import FakeEmbeddings


def test_it_embeds_through_the_service_in_input_order(fake_embeddings: FakeEmbeddings) -> None:
    fake_embeddings.dimensions = 384
    embedder = OpenAICompatibleEmbedder(
        fake_embeddings.url, "text-embedding-3-small", "sk-test", 384
    )
    vectors = embedder.embed(["first", "second"])
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)  # normalised here
    assert np.allclose(vectors[1], fake_embeddings.vector("second"))  # in input order
    request = fake_embeddings.requests[0]
    assert (request["path"], request["auth"], request["model"]) == (
        "/v1/embeddings",
        "Bearer sk-test",
        "text-embedding-3-small",
    )
    assert (request["input"], request["dimensions"]) == (["first", "second"], 384)


def test_it_refuses_vectors_of_the_wrong_size(fake_embeddings: FakeEmbeddings) -> None:
    fake_embeddings.dimensions = 1536
    with pytest.raises(EmbeddingError, match="expected"):
        OpenAICompatibleEmbedder(fake_embeddings.url, "m", None, 384).embed(["x"])


def test_it_reports_a_failing_service(fake_embeddings: FakeEmbeddings) -> None:
    fake_embeddings.fail_after = 0
    with pytest.raises(EmbeddingError, match="failed"):
        OpenAICompatibleEmbedder(fake_embeddings.url, "m", None, 384).embed(["x"])


@pytest.mark.django_db
def test_it_answers_503_and_stores_nothing_when_the_service_fails(
    fake_embeddings: FakeEmbeddings, monkeypatch: pytest.MonkeyPatch, client: Any
) -> None:
    from memory.models import Memory
    from memory.text import embeddings
    from tenants.db import project_context
    from tests.factory import auth, make_key

    fake_embeddings.fail_after = 0
    down = OpenAICompatibleEmbedder(fake_embeddings.url, "m", None, 384)
    monkeypatch.setattr(embeddings, "_active", (embeddings.configured_space(), down))
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
    fake_embeddings: FakeEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
    client: Any,
    committed_db: None,
) -> None:
    """An HTTP call of up to 30 s must never hold a transaction (and its locks) open."""
    from memory.extraction.llm.offline import OfflineExtractor
    from memory.extraction.pipeline import process_event
    from memory.models import Memory, MemoryEvent
    from memory.text import embeddings
    from tenants.db import project_context
    from tests.factory import auth, make_key

    fake_embeddings.dimensions = 384
    embedder = RecordingEmbedder(fake_embeddings.url, "m", None, 384)
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


def test_a_hosted_model_embeds_the_reference_facts_once_and_a_failure_is_retried_later(
    fake_embeddings: FakeEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memory.text.reference with a hosted model: the 600 facts in one request on the first
    search, not again; while the service fails, no answer gap (None) and no request per search
    until RETRY_SECONDS have passed."""
    from memory.text import embeddings, reference

    fake_embeddings.dimensions = 384
    hosted = OpenAICompatibleEmbedder(fake_embeddings.url, "m", None, 384)
    monkeypatch.setattr(embeddings, "_active", (embeddings.configured_space(), hosted))
    monkeypatch.setattr(reference, "_vectors", None)
    fact = reference.facts()[0]
    assert reference.typical_match(fake_embeddings.vector(fact)) == pytest.approx(1.0)
    unrelated = reference.typical_match(fake_embeddings.vector("no such thing"))
    assert unrelated is not None and unrelated < 1.0
    assert [len(r["input"]) for r in fake_embeddings.requests] == [len(reference.facts())]

    fake_embeddings.fail_after = len(fake_embeddings.requests)
    monkeypatch.setattr(reference, "_vectors", None)
    assert reference.typical_match(fake_embeddings.vector(fact)) is None
    assert reference.typical_match(fake_embeddings.vector(fact)) is None
    assert len(fake_embeddings.requests) == 2  # the failure is not retried at once
    monkeypatch.setattr(reference, "RETRY_SECONDS", 0.0)
    fake_embeddings.fail_after = None
    assert reference.typical_match(fake_embeddings.vector(fact)) == pytest.approx(1.0)
    assert len(fake_embeddings.requests) == 3


def test_the_bundled_models_saved_vectors_of_another_shape_are_made_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """memory.text.reference with the bundled model: vectors saved beside it that no longer fit
    (another model's, or an edited list's under the same name) are not used; the facts are
    embedded again, and a fact's own vector is its closest."""
    from memory.text import embeddings, reference

    embedder = embeddings.get_embedder()
    assert isinstance(embedder, embeddings.OnnxSentenceModel)
    stale = tmp_path / "reference-stale.npy"
    np.save(stale, np.ones((3, embedder.dimensions), dtype=np.float32))
    monkeypatch.setattr(reference, "vectors_file", lambda model_dir, languages: stale)
    monkeypatch.setattr(reference, "_vectors", None)
    facts = reference.facts(embedder.model.languages)  # the bundled model's: English
    fact = facts[7]
    assert reference.typical_match(embedder.embed([fact])[0]) == pytest.approx(1.0, abs=1e-5)
    made = reference._vectors
    assert made is not None and made[1] is not None
    assert made[1].shape == (len(facts), embedder.dimensions)
