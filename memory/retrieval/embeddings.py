"""Text embeddings: all-MiniLM-L6-v2 run with onnxruntime (no torch at run time).

One model is loaded per process, on first use. `embed()` is the whole interface the rest of
engram uses; another backend (a hosted embedding API) only has to implement `Embedder`.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from config.exceptions import ServiceUnavailableError

PINS_FILE = Path(__file__).resolve().parent.parent / "model.sha256"
MAX_TOKENS = 256  # the model's max_seq_length in sentence-transformers
BATCH_SIZE = 64
# The tokenizer's whole words and their vectors, made once beside the model by
# scripts/embed_vocabulary.py (`make model`): embed_words() looks a word up instead of running
# the model. Optional: without them every word is embedded.
VOCABULARY_WORDS = "words.txt"
VOCABULARY_VECTORS = "words.npy"

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Return one L2-normalised row per text."""
        ...


def verify_model_files(model_dir: Path) -> None:
    """Refuse to start on a missing or altered model: the sha256 pins are in model.sha256."""
    for line in PINS_FILE.read_text().splitlines():
        expected, name = line.split()
        path = model_dir / name
        if not path.is_file():
            raise ImproperlyConfigured(
                f"Embedding model file {path} is missing: run `make model` "
                "(scripts/export-model.sh) or set ENGRAM_MODEL_DIR."
            )
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != expected:
            raise ImproperlyConfigured(
                f"{path} has sha256 {digest}, expected {expected}: delete the directory and "
                "run `make model` again."
            )


class OnnxMiniLM:
    """sentence-transformers' all-MiniLM-L6-v2: BERT, mean pooling, L2 normalisation."""

    name = "all-MiniLM-L6-v2"
    dimensions = 384

    def __init__(self, model_dir: Path, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        verify_model_files(model_dir)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle worker threads must sleep, not spin: on a 2-core machine spinning threads take
        # the CPU from the request thread that runs the SQL right after the embedding.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(model_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 - a token name
        self.model_dir = model_dir
        self._vocabulary: tuple[dict[str, int], Vectors] | None = None

    def vocabulary(self) -> tuple[dict[str, int], Vectors]:
        """The precomputed words (word -> row) and their vectors, mapped read-only on first use;
        empty when the files are missing or disagree (then every word is embedded)."""
        if self._vocabulary is None:
            words_file = self.model_dir / VOCABULARY_WORDS
            vectors_file = self.model_dir / VOCABULARY_VECTORS
            rows: dict[str, int] = {}
            vectors: Vectors = np.zeros((0, self.dimensions), dtype=np.float32)
            if words_file.is_file() and vectors_file.is_file():
                words = words_file.read_text().splitlines()
                mapped = np.load(vectors_file, mmap_mode="r")
                if mapped.shape == (len(words), self.dimensions) and mapped.dtype == np.float32:
                    rows, vectors = {w: i for i, w in enumerate(words)}, mapped
            self._vocabulary = (rows, vectors)
        return self._vocabulary

    def embed_words(self, words: Sequence[str]) -> Vectors:
        """embed(words), with the precomputed ones looked up."""
        rows, vectors = self.vocabulary()
        out = np.empty((len(words), self.dimensions), dtype=np.float32)
        missing = [i for i, w in enumerate(words) if w not in rows]
        for i, word in enumerate(words):
            if word in rows:
                out[i] = vectors[rows[word]]
        if missing:
            out[missing] = self.embed([words[i] for i in missing])
        return out

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        # Batches of similar lengths pad less; results are put back in the caller's order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(order), BATCH_SIZE):
            chunk = order[start : start + BATCH_SIZE]
            out[chunk] = self._embed_batch([texts[i] for i in chunk])
        return out

    def _embed_batch(self, texts: list[str]) -> Vectors:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = self.session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        normalised: Vectors = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return normalised


class EmbeddingError(ServiceUnavailableError):
    """The embedding service failed or answered something unusable."""


class OpenAICompatibleEmbedder:
    """A hosted embedding API speaking OpenAI's POST /v1/embeddings (OpenAI, vLLM, Ollama, …).

    It must return `dimensions` floats per text (OpenAI's text-embedding-3 models take a
    `dimensions` parameter, which is sent); vectors are L2-normalised here like the local ones.
    """

    name = "openai-compatible"

    def __init__(self, url: str, model: str, api_key: str | None, dimensions: int) -> None:
        import httpx

        self.dimensions = dimensions
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=30)

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        body = {"model": self.model, "input": list(texts), "dimensions": self.dimensions}
        try:
            response = self.http.post("/embeddings", json=body)
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = np.array([item["embedding"] for item in data], dtype=np.float32)
        except Exception as exc:
            raise EmbeddingError(f"embedding service failed: {exc}") from exc
        if vectors.shape != (len(texts), self.dimensions):
            raise EmbeddingError(
                f"embedding service returned shape {vectors.shape}, "
                f"expected ({len(texts)}, {self.dimensions})"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        normalised: Vectors = (vectors / np.clip(norms, 1e-12, None)).astype(np.float32)
        return normalised


def build_embedder() -> Embedder:
    if settings.ENGRAM_EMBEDDER == "openai-compatible":
        return OpenAICompatibleEmbedder(
            settings.ENGRAM_EMBEDDING_URL,
            settings.ENGRAM_EMBEDDING_MODEL,
            settings.ENGRAM_EMBEDDING_API_KEY,
            settings.EMBEDDING_DIMENSIONS,
        )
    return OnnxMiniLM(Path(settings.ENGRAM_MODEL_DIR), threads=settings.ENGRAM_EMBED_THREADS)


_lock = threading.Lock()
_embedder: Embedder | None = None


def get_embedder() -> Embedder:
    global _embedder  # noqa: PLW0603 - one loaded model per process, created on first use
    if _embedder is None:
        with _lock:
            if _embedder is None:
                _embedder = build_embedder()
    return _embedder


def embed(texts: Sequence[str]) -> Vectors:
    return get_embedder().embed(texts)


def embed_words(words: Sequence[str]) -> Vectors:
    """embed(words) for single words, looked up where the local model has them precomputed."""
    embedder = get_embedder()
    if isinstance(embedder, OnnxMiniLM):
        return embedder.embed_words(words)
    return embedder.embed(words)


def vocabulary_words(words: Sequence[str]) -> list[str]:
    """The `words` embed_words() looks up rather than runs the model for: those of the local
    model's vocabulary; all of them with an embedder that has none (a hosted one, or the local
    one without its vocabulary files)."""
    embedder = get_embedder()
    rows = embedder.vocabulary()[0] if isinstance(embedder, OnnxMiniLM) else {}
    return [w for w in words if w in rows] if rows else list(words)


def embed_one(text: str) -> list[float]:
    return [float(x) for x in embed([text])[0]]
