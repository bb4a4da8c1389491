"""The second local model, all-mpnet-base-v2 (ENGRAM_LOCAL_MODEL), run from its ONNX export as
`make model-mpnet` puts it beside the default model's folder: the same vectors as
sentence-transformers, an int8 query copy that points the same way, its vocabulary, and how a
deployment names and finds it. The switch of a running deployment to it is in test_reembed.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.test import override_settings

from memory.text import reference as reference_facts
from memory.text.embeddings import (
    DEFAULT_LOCAL_MODEL,
    LOCAL_MODELS,
    OnnxSentenceModel,
    Space,
    build_embedder,
    configured_space,
    model_dir,
)

MPNET = "all-mpnet-base-v2"
REFERENCE = Path(__file__).parent / "data" / "mpnet_reference.json"


def reference() -> tuple[list[str], np.ndarray]:
    items = json.loads(REFERENCE.read_text())["items"]
    return [i["text"] for i in items], np.array([i["vector"] for i in items], dtype=np.float32)


@pytest.fixture(scope="module")
def mpnet() -> OnnxSentenceModel:
    embedder = build_embedder(Space("local", 768, model=MPNET))
    assert isinstance(embedder, OnnxSentenceModel)
    return embedder


def test_it_is_found_beside_the_configured_model_and_named_by_its_space(
    mpnet: OnnxSentenceModel,
) -> None:
    assert mpnet.model_dir == Path(settings.ENGRAM_MODEL_DIR).parent / MPNET
    # The settings know each model's dimension without importing this module: the same.
    assert {n: m.dimensions for n, m in LOCAL_MODELS.items()} == settings.LOCAL_MODEL_DIMENSIONS
    assert (mpnet.name, mpnet.dimensions) == (MPNET, 768)
    assert Space("local", 768, model=MPNET).name == "local:all-mpnet-base-v2"
    # A local space recorded before the choice existed has no model: it is the default one.
    legacy = Space("local", 384)
    assert legacy.name == f"local:{DEFAULT_LOCAL_MODEL}" and legacy.same_model(configured_space())
    assert not Space("local", 768, model=MPNET).same_model(configured_space())
    with override_settings(ENGRAM_LOCAL_MODEL=MPNET, ENGRAM_MODEL_DIR=Path("/srv/mpnet")):
        assert configured_space() == Space("local", 768, model=MPNET)
        assert model_dir(MPNET) == Path("/srv/mpnet")  # the settings' own model: their folder
        assert model_dir(DEFAULT_LOCAL_MODEL) == Path("/srv") / DEFAULT_LOCAL_MODEL


def test_it_matches_sentence_transformers_within_1e_5(mpnet: OnnxSentenceModel) -> None:
    texts, expected = reference()
    got = mpnet.embed(texts)
    assert got.shape == (len(texts), 768)
    assert float(np.abs(got - expected).max()) < 1e-5
    # One text at a time (no padding) gives the same: the padding token and mask are its own.
    one_by_one = np.vstack([mpnet.embed([t]) for t in texts])
    assert float(np.abs(one_by_one - expected).max()) < 1e-5


def test_its_queries_point_where_the_full_model_does(mpnet: OnnxSentenceModel) -> None:
    """Through its int8 copy where that agrees with the full model on this CPU; on one where
    onnxruntime's int8 kernels saturate (an AVX2 CPU without VNNI), through the full model."""
    texts, expected = reference()
    queries = np.vstack([mpnet.embed_query(t) for t in texts])
    moved = float(np.abs(queries - expected).max())
    assert (moved > 1e-3) == mpnet.queries_quantized, moved  # which model ran, as it says
    cosines = (queries * expected).sum(axis=1)
    # Its feed-forward blocks' second matrices stay in full precision (scripts/quantize_model.py):
    # quantized, this fell to 0.74 on the 400-token text.
    assert float(cosines.min()) > 0.97, cosines
    assert ((queries @ expected.T).argmax(axis=1) == np.arange(len(texts))).all()


def test_its_vocabulary_and_reference_facts_are_its_own(mpnet: OnnxSentenceModel) -> None:
    rows, vectors = mpnet.vocabulary()  # `make model-mpnet` (scripts/embed_vocabulary.py)
    assert len(rows) > 20_000 and vectors.shape == (len(rows), 768)
    words = ["cities", "cello"]
    assert float(np.abs(mpnet.embed_words(words) - mpnet.embed(words)).max()) < 1e-5
    # An English model's reference facts are the English ones (no translation).
    english = reference_facts.facts(mpnet.model.languages)
    assert english == reference_facts.facts(frozenset({"en"}))
    kept = np.load(reference_facts.vectors_file(mpnet.model_dir, mpnet.model.languages))
    assert kept.shape == (len(english), 768)
    assert float(np.abs(kept[:3] - mpnet.embed(english[:3])).max()) < 1e-5


def test_it_ranks_a_paraphrased_answer_first() -> None:
    """What it is for: a question and its answer that share no word. The default model ranks
    the fact about a friend's city above the answer here; this one does not."""
    facts = [
        "These days home for me is a cottage in Salthill.",
        "My best friend Niamh lives in Boston.",
        "I grew up on a farm in Kerry.",
    ]
    question = "Where does the user live?"
    scores = {}
    for name in (DEFAULT_LOCAL_MODEL, MPNET):
        model = LOCAL_MODELS[name]
        embedder = build_embedder(Space("local", model.dimensions, model=name))
        scores[name] = embedder.embed(facts) @ embedder.embed([question])[0]
    assert int(np.argmax(scores[MPNET])) == 0, scores
    assert int(np.argmax(scores[DEFAULT_LOCAL_MODEL])) != 0, scores
