"""What one request may cost: the embedding work it asks for on the request path.

Counted in the local model's tokens (each text at most its 256-token window) before anything
is embedded; over ENGRAM_MAX_EMBED_TOKENS the request is a 400 naming the limit, and nothing
is stored.
"""

from __future__ import annotations

import resource

import pytest
from django.test import override_settings

from memory.models import Memory
from memory.text.embeddings import MAX_TOKENS, EmbeddingBudgetError, embed, get_embedder
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import make_memory

# A message that fills the model's window: 300 words of one token each, plus [CLS] and [SEP].
LONG = "word " * 300


def tokens(text: str) -> int:
    return min(len(get_embedder().tokenizer.encode(text).ids), MAX_TOKENS)  # type: ignore[attr-defined]


def add_body(*texts: str) -> dict[str, object]:
    return {
        "messages": [{"role": "user", "content": t} for t in texts],
        "user_id": "alice",
        "infer": False,
    }


@override_settings(ENGRAM_MAX_EMBED_TOKENS=3 * MAX_TOKENS)
class EmbeddingBudgetTestCase(BaseTestCase):
    def test_an_add_within_the_budget_is_stored(self) -> None:
        response = self.call("post", "/v1/memories/", add_body(LONG + "1", LONG + "2", LONG + "3"))
        assert response.status_code == 200, response.json()
        assert len(self.active_texts()) == 3

    def test_an_add_over_the_budget_is_refused_and_stores_nothing(self) -> None:
        four = [LONG + str(n) for n in range(4)]
        response = self.call("post", "/v1/memories/", add_body(*four))
        assert response.status_code == 400
        detail = response.json()["detail"]
        assert f"{4 * MAX_TOKENS} tokens" in detail
        assert f"limit of {3 * MAX_TOKENS} per request (ENGRAM_MAX_EMBED_TOKENS)" in detail
        assert self.active_texts() == set()

    def test_the_same_text_twice_counts_once(self) -> None:
        texts = [LONG + "a", LONG + "b", LONG + "c", LONG + "a"]
        assert self.call("post", "/v1/memories/", add_body(*texts)).status_code == 200

    def test_short_texts_count_their_own_tokens_not_the_window(self) -> None:
        sentences = [f"I visited city number {n} last year." for n in range(40)]
        assert sum(tokens(s) for s in sentences) <= 3 * MAX_TOKENS
        response = self.call("post", "/v1/memories/", add_body(*sentences))
        assert response.status_code == 200, response.json()
        assert len(self.active_texts()) == 40

    def test_a_batch_update_over_the_budget_is_refused_and_changes_nothing(self) -> None:
        pid = self.alice.key.project_id
        with project_context(pid):
            stored = [make_memory(pid, f"memory {n}") for n in range(4)]
        body = {"memories": [{"memory_id": str(m.id), "text": LONG + str(n)}
                             for n, m in enumerate(stored)]}  # fmt: skip
        response = self.call("put", "/v1/batch/", body)
        assert response.status_code == 400
        assert "ENGRAM_MAX_EMBED_TOKENS" in response.json()["detail"]
        with project_context(pid):
            assert sorted(Memory.objects.values_list("text", flat=True)) == [
                f"memory {n}" for n in range(4)
            ]
        body["memories"] = body["memories"][:3]
        assert self.call("put", "/v1/batch/", body).status_code == 200


def test_the_budget_is_checked_before_the_model_runs() -> None:
    """Refused before any batch runs: the refusal costs a tokenization, not a model run."""
    with pytest.raises(EmbeddingBudgetError):
        embed([LONG + str(n) for n in range(2_000)], max_tokens=MAX_TOKENS)


def test_long_batches_give_their_memory_back() -> None:
    """ONNX Runtime's arena grows to fit a batch of full-window texts; it is shrunk after such
    a run, so a process's resident memory does not stay at its largest batch's size."""
    embed(["warm up"])
    before = _rss_mb()
    embed([LONG + str(n) for n in range(24)])
    grown = _rss_mb() - before
    # Without the shrink and the trim ~150 MB stay after such a run (measured).
    assert grown < 60, f"resident memory grew by {grown:.0f} MB"


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20
