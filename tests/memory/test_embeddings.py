from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured

from memory.retrieval.embeddings import embed, get_embedder, verify_model_files

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


def reference() -> tuple[list[str], np.ndarray]:
    items = json.loads(REFERENCE.read_text())["items"]
    return [i["text"] for i in items], np.array([i["vector"] for i in items], dtype=np.float32)


def test_it_matches_sentence_transformers_within_1e_5() -> None:
    texts, expected = reference()
    got = embed(texts)
    assert got.shape == (len(texts), 384)
    assert float(np.abs(got - expected).max()) < 1e-5


def test_it_does_not_depend_on_batch_composition() -> None:
    texts, expected = reference()
    one_by_one = np.vstack([embed([t]) for t in texts])
    assert float(np.abs(one_by_one - expected).max()) < 1e-5


def test_it_returns_unit_vectors_in_input_order() -> None:
    vectors = embed(["coffee", "a much longer sentence about tea and biscuits", "coffee"])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors[0], vectors[2])
    assert not np.allclose(vectors[0], vectors[1])


def test_it_loads_one_model_per_process() -> None:
    assert get_embedder() is get_embedder()


def test_it_refuses_altered_model_files(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not a model")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ImproperlyConfigured, match="sha256"):
        verify_model_files(tmp_path)


def test_it_names_a_missing_model_and_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match="make model"):
        verify_model_files(tmp_path)
