from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from memory.text import embeddings
from memory.text.embeddings import (
    DEFAULT_LOCAL_MODEL,
    LOCAL_MODELS,
    VOCABULARY_VECTORS,
    VOCABULARY_WORDS,
    OnnxSentenceModel,
    build_embedder,
    embed,
    embed_query,
    embed_words,
    get_embedder,
    verify_model_files,
)

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
        verify_model_files(tmp_path, LOCAL_MODELS[DEFAULT_LOCAL_MODEL])


def test_it_names_a_missing_model_and_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match="make model"):
        verify_model_files(tmp_path, LOCAL_MODELS[DEFAULT_LOCAL_MODEL])


def test_precomputed_words_are_looked_up_and_equal_the_models_vectors() -> None:
    embedder = get_embedder()
    assert isinstance(embedder, OnnxSentenceModel)
    rows, _ = embedder.vocabulary()  # made by `make model` (scripts/embed_vocabulary.py)
    assert len(rows) > 20_000 and "cities" in rows and "zxqvbrand" not in rows
    words = ["cities", "zxqvbrand", "games"]
    with mock.patch.object(embedder, "embed", wraps=embedder.embed) as run:
        looked_up = embed_words(words)
    run.assert_called_once_with(["zxqvbrand"])  # only the unknown word runs the model
    assert float(np.abs(looked_up - embed(words)).max()) < 1e-5


def test_missing_or_inconsistent_word_files_mean_every_word_is_embedded(tmp_path: Path) -> None:
    model_dir = get_embedder().model_dir  # type: ignore[attr-defined]
    for name in ("model.onnx", "model-int8.onnx", "tokenizer.json"):
        (tmp_path / name).symlink_to(model_dir / name)
    assert OnnxSentenceModel(tmp_path, threads=1).vocabulary()[0] == {}
    (tmp_path / VOCABULARY_WORDS).write_text("cities\ngames\n")
    np.save(tmp_path / VOCABULARY_VECTORS, np.zeros((3, 384), dtype=np.float32))  # 3 rows, 2 words
    embedder = OnnxSentenceModel(tmp_path, threads=1)
    assert embedder.vocabulary()[0] == {}
    assert float(np.abs(embedder.embed_words(["cities"]) - embed(["cities"])).max()) < 1e-5


def test_queries_go_through_the_int8_copy_and_stay_close_to_the_full_model() -> None:
    texts, expected = reference()
    queries = np.array([embed_query(t) for t in texts], dtype=np.float32)
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    cosines = (queries * expected).sum(axis=1)
    # A different model run (not the full one) ...
    assert float(np.abs(queries - expected).max()) > 1e-3
    # ... whose vectors point where the full model's do: each query still finds its own text.
    assert float(cosines.min()) > 0.97
    assert ((queries @ expected.T).argmax(axis=1) == np.arange(len(texts))).all()


def test_the_setting_chooses_the_query_model() -> None:
    with override_settings(ENGRAM_QUERY_PRECISION="full"):
        full = build_embedder()
    assert isinstance(full, OnnxSentenceModel) and full.query_session is full.session
    quantized = build_embedder()  # the default, int8
    assert isinstance(quantized, OnnxSentenceModel)
    assert quantized.query_session is not quantized.session


def test_an_int8_copy_that_disagrees_with_the_full_model_is_not_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On a CPU whose int8 kernels saturate, the copy's vectors stray from the full model's:
    asked for an agreement no copy reaches, the model answers queries with the full one."""
    monkeypatch.setattr(embeddings, "QUERY_AGREEMENT", 1.01)
    model_dir = get_embedder().model_dir  # type: ignore[attr-defined]
    model = OnnxSentenceModel(model_dir, threads=1, quantized_queries=True)
    assert model.query_session is model.session and not model.queries_quantized
    assert "disagrees with the full model on this CPU" in caplog.text
    texts, expected = reference()
    got = np.vstack([model.embed_query(t) for t in texts])
    assert float(np.abs(got - expected).max()) < 1e-5


def test_full_precision_queries_are_the_full_models_vectors() -> None:
    model_dir = get_embedder().model_dir  # type: ignore[attr-defined]
    full = OnnxSentenceModel(model_dir, threads=1, quantized_queries=False)
    texts, expected = reference()
    got = np.vstack([full.embed_query(t) for t in texts])
    assert float(np.abs(got - expected).max()) < 1e-5


def test_a_query_read_two_ways_is_the_mean_direction_of_its_readings() -> None:
    readings = ("Where does the user live?", "Where do I live?")
    each = np.array([embed_query(r) for r in readings], dtype=np.float32)
    both = np.array(embed_query(*readings), dtype=np.float32)
    mean = each.mean(axis=0)
    # Each reading embedded on its own, as if it were the query.
    assert float(np.abs(both - mean / np.linalg.norm(mean)).max()) < 1e-6
    assert abs(float(np.linalg.norm(both)) - 1.0) < 1e-5
    assert all(float(both @ v) < 0.999 for v in each)  # neither reading alone
