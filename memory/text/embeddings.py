"""Text embeddings: a local sentence model run with onnxruntime (no torch at run time; one of
LOCAL_MODELS, ENGRAM_LOCAL_MODEL), or a hosted model behind an OpenAI-compatible embeddings API,
of any dimension.

`embed()` is the whole interface the rest of engram uses. Which model embeds is the
deployment's, not the process's: the `current` embedding space (memory.models.EmbeddingSpace)
that the first `migrate` recorded from the settings and `manage.py reembed` may switch. A
process starts with its settings' model (`configured_space`; `manage.py check --database
default` refuses to start one whose settings differ from the deployment's) and, while it runs,
re-reads the current space at most every ENGRAM_EMBEDDING_CHECK_SECONDS when it has a database
connection open, so it follows a switch without a restart (`get_embedder`). One model is loaded
per process and space, on first use.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connection, transaction

from config import metrics
from config.exceptions import RefusedError, ServiceUnavailableError

logger = logging.getLogger(__name__)

# The sha256 pins of each local model's files: PINS_DIR/<model name>.sha256.
PINS_DIR = Path(__file__).resolve().parent.parent / "model-pins"
MAX_TOKENS = 256  # the models' max_seq_length in sentence-transformers
MODEL_FILE = "model.onnx"
# The same model with its weights quantized to int8 (scripts/quantize_model.py, made by
# `make model`): search queries go through it (ENGRAM_QUERY_PRECISION), 2.3x faster than the
# full model; its vectors of LoCoMo's questions have cosine 0.991 at worst, 0.995 median, with
# the full model's (docs/benchmarks.md), and the memories' stored vectors stay the full model's.
QUERY_MODEL_FILE = "model-int8.onnx"
# The int8 copy is used only if, on this machine, its vectors of AGREEMENT_TEXTS have at least
# this cosine with the full model's (its measured worst is 0.991): onnxruntime's int8 kernels
# differ by CPU, and on an AVX2 CPU without VNNI all-mpnet-base-v2's copy gave cosines near 0
# (its u8 x s8 products saturate). Otherwise search queries run through the full model.
QUERY_AGREEMENT = 0.97
AGREEMENT_TEXTS = (
    "I moved to Lisbon last spring for a job at a small design studio.",
    "Which instrument does she play in the evenings?",
    "My sister's birthday is on the 14th of March and she loves orchids.",
    "allergic to peanuts",
)
BATCH_SIZE = 64
# The tokenizer's whole words and their vectors, made once beside the model by
# scripts/embed_vocabulary.py (`make model`): embed_words() looks a word up instead of running
# the model. Optional: without them every word is embedded.
VOCABULARY_WORDS = "words.txt"
VOCABULARY_VECTORS = "words.npy"

Vectors = npt.NDArray[np.float32]


# A batch holds at most BATCH_SIZE texts and BATCH_POSITIONS token positions (texts x the
# longest): the model's working memory grows with the positions (peak ~150 MB over start-up for
# 8 full-window texts, ~770 MB for 32), and the time per text does not (measured, one thread).
BATCH_POSITIONS = 2_048
# A run over more positions than this gives the memory it took back to the system afterwards.
# ONNX Runtime's CPU arena otherwise keeps its largest size for good (~1 GB after batches of
# 64 full-window texts; 2.3 GB was seen in a web worker, against ~190 MB after start-up).
# Below it (a query, a few sentences) the arena is kept and reused.
SHRINK_AFTER_POSITIONS = 1_024
# Texts are tokenized this many at a time, and only their first WINDOW_CHARACTERS
# (OnnxSentenceModel._tokenize).
TOKENIZE_CHUNK = 16
WINDOW_CHARACTERS = 16 * MAX_TOKENS
# A hosted embedder's token count is estimated at this many characters per token.
CHARACTERS_PER_TOKEN = 4


class EmbeddingBudgetError(RefusedError):
    """The texts to embed exceed the token budget the caller allowed (the API answers 400)."""

    def __init__(self, tokens: int, budget: int) -> None:
        super().__init__(
            f"The texts to embed come to {tokens} tokens or more, above this server's limit of "
            f"{budget} per request (ENGRAM_MAX_EMBED_TOKENS): send fewer or shorter texts "
            "per request."
        )


class Embedder(Protocol):
    name: str
    dimensions: int

    def embed(self, texts: Sequence[str], max_tokens: int | None = None) -> Vectors:
        """Return one L2-normalised row per text; raise EmbeddingBudgetError, before any work,
        when the texts come to more than `max_tokens` tokens (None: no limit)."""
        ...


def check_budget(tokens: int, max_tokens: int | None) -> None:
    if max_tokens is not None and tokens > max_tokens:
        raise EmbeddingBudgetError(tokens, max_tokens)


@dataclass(frozen=True)
class LocalModel:
    """A sentence-transformers model engram runs itself: transformer, mean pooling, L2
    normalisation, exported to ONNX by scripts/export-model.sh."""

    name: str
    dimensions: int
    # Whether the ONNX graph takes token_type_ids (BERT's) besides the ids and the mask.
    type_ids: bool
    pad_id: int  # the tokenizer's padding token
    # What the model was trained to read before a search query and before anything else (the
    # texts searched, entity names, words): E5's "query: " and "passage: ".
    query_prefix: str = ""
    passage_prefix: str = ""
    # The languages it was trained on and measured in (ISO 639-1); a query in another is
    # answered with a warning (memory.search). Empty: any.
    languages: frozenset[str] = frozenset()
    # Whether the memories' vectors come from the int8 copy too, the full model never loaded
    # (multilingual-e5-small: its weights are 4-bit ones to begin with; its int8 copy's vectors
    # have cosine 0.990 at worst with the full model's, at 2.4x the speed and a quarter of the
    # memory: docs/benchmarks.md), where the copy agrees with the full model on this CPU.
    int8_everywhere: bool = False

    @property
    def agreement(self) -> Path:
        """The full model's vectors of AGREEMENT_TEXTS (int8_everywhere's check), pinned."""
        return PINS_DIR / f"{self.name}.agreement.json"

    @property
    def pins(self) -> Path:
        return PINS_DIR / f"{self.name}.sha256"


# The local models: all-MiniLM-L6-v2 (the default: 6 layers, fast) and all-mpnet-base-v2 (12
# layers, 768 dimensions: better rankings at about 5x the cost per text; docs/benchmarks.md),
# both English only; multilingual-e5-small (12 layers, 384 dimensions, about 100 languages,
# from 4-bit weights: scripts/export_onnx.py).
ENGLISH = frozenset({"en"})
LOCAL_MODELS = {
    model.name: model
    for model in (
        LocalModel("all-MiniLM-L6-v2", 384, type_ids=True, pad_id=0, languages=ENGLISH),
        LocalModel("all-mpnet-base-v2", 768, type_ids=False, pad_id=1, languages=ENGLISH),
        LocalModel(
            "multilingual-e5-small",
            384,
            type_ids=True,
            pad_id=1,
            query_prefix="query: ",
            passage_prefix="passage: ",
            int8_everywhere=True,
        ),
    )
}
DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"


def verify_model_files(model_dir: Path, model: LocalModel) -> None:
    """Refuse to start on a missing or altered model: the sha256 pins are in model-pins/."""
    for line in model.pins.read_text().splitlines():
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


class OnnxSentenceModel:
    """A LocalModel run with onnxruntime from the files in `model_dir`."""

    def __init__(
        self,
        model_dir: Path,
        threads: int,
        *,
        quantized_queries: bool = False,
        model: LocalModel = LOCAL_MODELS[DEFAULT_LOCAL_MODEL],
    ) -> None:
        from tokenizers import Tokenizer

        verify_model_files(model_dir, model)
        self.model = model
        self.name = model.name
        self.dimensions = model.dimensions
        self.threads = threads
        self.quantized_queries = quantized_queries
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()  # each batch is padded to its longest text (_embed_batch)
        self.model_dir = model_dir
        self._vocabulary: tuple[dict[str, int], Vectors] | None = None
        # Whether `session` is the int8 copy (LocalModel.int8_everywhere, where it agrees).
        self.int8_everywhere = False
        if model.int8_everywhere:
            self.session = self._int8_if_it_agrees()
        else:
            self.session = _session(model_dir / MODEL_FILE, threads)

    def _int8_if_it_agrees(self) -> Any:
        """The int8 copy, when its vectors of AGREEMENT_TEXTS have at least QUERY_AGREEMENT
        cosine with the full model's (pinned beside the model's sha256 pins); else the full
        model, with a warning (onnxruntime's int8 kernels differ by CPU)."""
        quantized = _session(self.model_dir / QUERY_MODEL_FILE, self.threads)
        expected = np.array(json.loads(self.model.agreement.read_text())["vectors"])
        rows = self._tokenize(AGREEMENT_TEXTS, None, self.model.passage_prefix)
        copied = np.vstack([self._embed_batch([row], quantized) for row in rows])
        worst = float((expected * copied).sum(axis=1).min())
        if worst >= QUERY_AGREEMENT:
            self.int8_everywhere = True
            return quantized
        logger.warning(
            "the int8 copy of %s disagrees with the full model on this CPU (cosine %.3f < %s): "
            "it embeds with the full model",
            self.name, worst, QUERY_AGREEMENT,
        )  # fmt: skip
        return _session(self.model_dir / MODEL_FILE, self.threads)

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

    @functools.cached_property
    def query_session(self) -> Any:
        """The session search queries run in: the int8 copy of the same model (QUERY_MODEL_FILE)
        when asked for and it agrees with the full model on this CPU (QUERY_AGREEMENT), loaded
        at the first query (~30 MB a process: a worker that never searches never loads it);
        else the full model's. Stored vectors always come from the full model."""
        if not self.quantized_queries or self.model.int8_everywhere:
            return self.session
        quantized = _session(self.model_dir / QUERY_MODEL_FILE, self.threads)
        rows = self._tokenize(AGREEMENT_TEXTS, None, self.model.passage_prefix)
        full = np.vstack([self._embed_batch([row]) for row in rows])
        copied = np.vstack([self._embed_batch([row], quantized) for row in rows])
        worst = float((full * copied).sum(axis=1).min())
        if worst < QUERY_AGREEMENT:
            logger.warning(
                "the int8 copy of %s disagrees with the full model on this CPU (cosine %.3f < "
                "%s): search queries use the full model",
                self.name, worst, QUERY_AGREEMENT,
            )  # fmt: skip
            return self.session
        return quantized

    @property
    def queries_quantized(self) -> bool:
        """Whether search queries run through the int8 copy here (query_session)."""
        return self.int8_everywhere or self.query_session is not self.session

    def embed_query(self, text: str) -> Vectors:
        """One search query's vector, through query_session. One text a run: the int8 model
        quantizes its activations over the whole batch, so a batch would move each text's
        vector by its neighbours' (up to 0.02 an element)."""
        rows = self._tokenize([text], None, self.model.query_prefix)
        vector: Vectors = self._embed_batch(rows, self.query_session)[0]
        return vector

    def embed(self, texts: Sequence[str], max_tokens: int | None = None) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        rows = self._tokenize(texts, max_tokens, self.model.passage_prefix)
        # Batches of similar lengths pad less; results are put back in the caller's order.
        order = sorted(range(len(texts)), key=lambda i: len(rows[i]))
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for chunk in batches(order, [len(row) for row in rows]):
            out[chunk] = self._embed_batch([rows[i] for i in chunk])
        if sum(map(len, rows)) > SHRINK_AFTER_POSITIONS:
            release_free_memory()
        return out

    def _tokenize(
        self, texts: Sequence[str], max_tokens: int | None, prefix: str
    ) -> list[list[int]]:
        """Each text's token ids (truncated to the window), counted against `max_tokens` as
        they come: tokenizing runs at about 1 MB/s here, so a request over its budget is
        refused after at most the budget's worth of text and one chunk, not all of it.

        Only a text's first WINDOW_CHARACTERS are tokenized: 256 tokens of any natural text
        end well before (4-6 characters a token), so the window is the same, and a 20,000-
        character message costs a fifth of its tokenizing. Each text is read after `prefix`
        (the model's query or passage prefix).
        """
        rows: list[list[int]] = []
        tokens = 0
        for start in range(0, len(texts), TOKENIZE_CHUNK):
            chunk = [prefix + t[:WINDOW_CHARACTERS] for t in texts[start : start + TOKENIZE_CHUNK]]
            encoded = [e.ids for e in self.tokenizer.encode_batch(chunk)]
            tokens += sum(map(len, encoded))
            check_budget(tokens, max_tokens)
            rows += encoded
        return rows

    def _embed_batch(self, rows: Sequence[Sequence[int]], session: Any = None) -> Vectors:
        width = max(len(row) for row in rows)
        ids = np.full((len(rows), width), self.model.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for index, row in enumerate(rows):
            ids[index, : len(row)] = row
            mask[index, : len(row)] = 1
        options = ort_run_options(shrink=ids.size > SHRINK_AFTER_POSITIONS)
        feed = {"input_ids": ids, "attention_mask": mask}
        if self.model.type_ids:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = (session or self.session).run(None, feed, options)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        normalised: Vectors = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return normalised


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Idle worker threads must sleep, not spin: on a 2-core machine spinning threads take
    # the CPU from the request thread that runs the SQL right after the embedding.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def batches(order: list[int], lengths: list[int]) -> list[list[int]]:
    """`order` (indexes by ascending length) cut into batches of at most BATCH_SIZE texts and
    BATCH_POSITIONS positions (a batch is padded to its last, longest text)."""
    found: list[list[int]] = [[]]
    for index in order:
        batch = found[-1]
        if batch and (
            len(batch) == BATCH_SIZE or (len(batch) + 1) * lengths[index] > BATCH_POSITIONS
        ):
            found.append(batch := [])
        batch.append(index)
    return found


def release_free_memory() -> None:
    """Give the C heap's free memory back to the system (glibc's malloc_trim; elsewhere
    nothing). After a large embedding run the arena is shrunk, but the tokenizer's and the
    model's input and output buffers leave the heap large and mostly free: ~50 MB measured
    after batches of 32 full-window texts, returned by this in a few milliseconds."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def ort_run_options(*, shrink: bool) -> Any:
    """onnxruntime RunOptions; `shrink` returns the CPU arena's unused memory after the run."""
    import onnxruntime as ort

    options = ort.RunOptions()
    if shrink:
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


class EmbeddingError(ServiceUnavailableError):
    """The embedding service failed or answered something unusable."""


class OpenAICompatibleEmbedder:
    """A hosted embedding API speaking OpenAI's POST /v1/embeddings (OpenAI, vLLM, Ollama, …).

    It must return `dimensions` floats per text (OpenAI's text-embedding-3 models take a
    `dimensions` parameter, which is sent unless `send_dimensions` is false); vectors are
    L2-normalised here like the local ones.
    """

    name = "openai-compatible"

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None,
        dimensions: int,
        *,
        send_dimensions: bool = True,
    ) -> None:
        import httpx

        self.dimensions = dimensions
        self.send_dimensions = send_dimensions
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=30)

    def embed(self, texts: Sequence[str], max_tokens: int | None = None) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        check_budget(sum(-(-len(t) // CHARACTERS_PER_TOKEN) for t in texts), max_tokens)
        body: dict[str, Any] = {"model": self.model, "input": list(texts)}
        if self.send_dimensions:
            body["dimensions"] = self.dimensions
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


@dataclass(frozen=True)
class Space:
    """An embedding model as the deployment records it (memory.models.EmbeddingSpace)."""

    embedder: str  # "local" or "openai-compatible"
    dimensions: int
    url: str = ""
    model: str = ""
    send_dimensions: bool = True

    @property
    def name(self) -> str:
        """The model's identity: vectors of the same name are the same."""
        if self.embedder == "openai-compatible":
            return f"openai-compatible:{self.model}"
        # A local space recorded before there was a choice of local model has no model: MiniLM.
        return f"local:{self.model or DEFAULT_LOCAL_MODEL}"

    @property
    def languages(self) -> frozenset[str]:
        """The languages its model serves (LocalModel.languages); empty: any, or not known (a
        hosted model's are its own)."""
        if self.embedder != "local":
            return frozenset()
        model = LOCAL_MODELS.get(self.model or DEFAULT_LOCAL_MODEL)
        return model.languages if model is not None else frozenset()

    def same_model(self, other: Space) -> bool:
        """Whether vectors of `other` are vectors of this space: the same model and dimension
        (where it is served and how it is asked are not the vectors' business: the server may
        move)."""
        return (self.name, self.dimensions) == (other.name, other.dimensions)


def configured_space() -> Space:
    """The embedding model this process's settings name."""
    if settings.ENGRAM_EMBEDDER == "openai-compatible":
        return Space(
            "openai-compatible",
            settings.EMBEDDING_DIMENSIONS,
            settings.ENGRAM_EMBEDDING_URL,
            settings.ENGRAM_EMBEDDING_MODEL,
            settings.ENGRAM_EMBEDDING_SEND_DIMENSIONS,
        )
    model = LOCAL_MODELS[settings.ENGRAM_LOCAL_MODEL]
    return Space("local", model.dimensions, model=model.name)


def build_embedder(space: Space | None = None) -> Embedder:
    space = space or configured_space()
    if space.embedder == "openai-compatible":
        return OpenAICompatibleEmbedder(
            space.url,
            space.model,
            settings.ENGRAM_EMBEDDING_API_KEY,
            space.dimensions,
            send_dimensions=space.send_dimensions,
        )
    model = LOCAL_MODELS[space.model or DEFAULT_LOCAL_MODEL]
    return OnnxSentenceModel(
        model_dir(model.name),
        threads=settings.ENGRAM_EMBED_THREADS,
        quantized_queries=settings.ENGRAM_QUERY_PRECISION == "int8",
        model=model,
    )


def model_dir(name: str) -> Path:
    """Where the local model `name`'s files are: ENGRAM_MODEL_DIR for the settings' own model,
    a folder of its name beside it for another (a deployment switched to it by `reembed`)."""
    configured = Path(settings.ENGRAM_MODEL_DIR)
    return configured if name == settings.ENGRAM_LOCAL_MODEL else configured.parent / name


CURRENT_SPACE_SQL = (
    "SELECT embedder, dimensions, url, model, send_dimensions FROM memory_embeddingspace "
    "WHERE state = 'current'"
)


def recorded_space() -> Space | None:
    """The deployment's current embedding space, or None before it is recorded (no table, or
    no row yet: the first `migrate` has not run). Inside a transaction the read is a savepoint
    of its own, so that a failed one leaves the caller's transaction usable."""
    guard = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    with connection.cursor() as cursor:
        try:
            with guard:
                cursor.execute(CURRENT_SPACE_SQL)
                row = cursor.fetchone()
        except DatabaseError:
            return None
    return Space(*row) if row else None


_lock = threading.Lock()
# The space this process embeds in and its model, and when the database was last asked.
_active: tuple[Space, Embedder] | None = None
_checked = 0.0


def get_embedder() -> Embedder:
    """The model of the deployment's current space (see the module's docstring)."""
    return _current()[1]


def _current() -> tuple[Space, Embedder]:
    global _active, _checked  # noqa: PLW0603 - one loaded model per process
    active = _active
    if active is None:
        with _lock:
            if _active is None:
                _active = configured_space(), build_embedder()
                _checked = time.monotonic()
            active = _active
    if time.monotonic() - _checked >= settings.ENGRAM_EMBEDDING_CHECK_SECONDS and _may_ask():
        _checked = time.monotonic()
        recorded = recorded_space()
        if recorded is not None and not recorded.same_model(active[0]):
            active = follow(recorded)
    return active


def _may_ask() -> bool:
    """Whether the database can be asked now without a connection of its own or harm: an open
    connection, not in a transaction that already failed."""
    return connection.connection is not None and not connection.needs_rollback


def follow(space: Space) -> tuple[Space, Embedder]:
    """Embed in `space` from now on (the deployment switched to it: `manage.py reembed`)."""
    global _active  # noqa: PLW0603
    embedder = build_embedder(space)
    with _lock:
        if _active is None or not _active[0].same_model(space):
            logger.warning(
                "the deployment's embedding model is now %s (%s dimensions): following it",
                space.name,
                space.dimensions,
            )
            _active = space, embedder
        return _active


def active_space(*, fresh: bool = False) -> Space:
    """The space this process embeds in now; `fresh`: the deployment's, asked now (a command
    that writes or reads vectors in bulk must not use a model the deployment has left)."""
    global _checked  # noqa: PLW0603
    if fresh:
        connection.ensure_connection()
        _checked = float("-inf")
    return _current()[0]


def in_process() -> bool:
    """Whether embedding runs in this process (the local model), not over HTTP."""
    return isinstance(get_embedder(), OnnxSentenceModel)


def embed(texts: Sequence[str], max_tokens: int | None = None) -> Vectors:
    with metrics.timed(metrics.EMBEDDING, "embed.texts", kind="texts", embedder=_where()):
        return get_embedder().embed(texts, max_tokens)


def _where() -> str:
    return "local" if in_process() else "hosted"


def embed_words(words: Sequence[str]) -> Vectors:
    """embed(words) for single words, looked up where the local model has them precomputed."""
    embedder = get_embedder()
    if isinstance(embedder, OnnxSentenceModel):
        return embedder.embed_words(words)
    return embedder.embed(words)


def vocabulary_words(words: Sequence[str]) -> list[str]:
    """The `words` embed_words() looks up rather than runs the model for: those of the local
    model's vocabulary; all of them with an embedder that has none (a hosted one, or the local
    one without its vocabulary files)."""
    embedder = get_embedder()
    rows = embedder.vocabulary()[0] if isinstance(embedder, OnnxSentenceModel) else {}
    return [w for w in words if w in rows] if rows else list(words)


def embed_one(text: str) -> list[float]:
    return [float(x) for x in embed([text])[0]]


def embed_query(*readings: str) -> list[float]:
    """A search query's vector: embed_one(text) of its one reading, with the local model through
    its query model (ENGRAM_QUERY_PRECISION); of several readings of the same question, the mean
    direction of theirs (a model run each, about 0.8 ms; one request to a hosted embedder)."""
    embedder = get_embedder()
    with metrics.timed(metrics.EMBEDDING, "embed.query", kind="query", embedder=_where()):
        if isinstance(embedder, OnnxSentenceModel):
            vectors = np.array([embedder.embed_query(text) for text in readings])
        else:
            vectors = np.asarray(get_embedder().embed(readings), dtype=np.float32)
    if len(readings) == 1:
        return [float(x) for x in vectors[0]]
    mean = vectors.mean(axis=0)
    return [float(x) for x in mean / max(float(np.linalg.norm(mean)), 1e-12)]
