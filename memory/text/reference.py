"""How well a direct answer to a search query would match it: the query's closest cosine among
REFERENCE_FACTS, 600 everyday first-person facts about no one in particular ("I'm vegetarian
since my teens.", "My brother is a firefighter.", "I have a full UK driving licence."), written
for engram across some ninety areas of a life (docs/search.md, "The score"), and their
translations into the languages a multilingual model serves (fact_files()).

A question whose answer a scope holds finds a memory about as close as the closest of these;
one about something the scope never mentions ("What is Dana's blood type?" among Dana's home,
work and cello) finds nothing nearly as close, while "My blood type is O negative."-like facts
are. The calibrator (scoring.fuse()) lowers the score of such a query's results (its answer
gap). The facts' vectors are made once per process and model: for the local model they are
read from the model's folder (written by `make model`: write_vectors()), else embedded on
first use (a hosted model: one request of 600 short texts).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memory.text.embeddings import Embedder, OnnxSentenceModel, get_embedder

logger = logging.getLogger(__name__)

REFERENCE_FACTS = Path(__file__).with_name("reference_facts.json")
TRANSLATIONS = Path(__file__).with_name("reference_facts")

# After a failure to embed the facts (a hosted model), searches go without the answer gap for
# this many seconds before the next try.
RETRY_SECONDS = 60.0

_lock = threading.Lock()
# The facts' unit vectors for the embedder they were made with (one model per process), or
# None with the time of a failure to make them.
_vectors: tuple[Embedder, np.ndarray | None, float] | None = None


def fact_files(languages: frozenset[str] = frozenset()) -> list[Path]:
    """The facts' files for a model serving `languages` (empty: any): the English facts, and
    their translations (TRANSLATIONS/<language>.json, the same 600 facts in the same order) for
    each language it serves. A direct answer in German is a German sentence: a German question's
    closest reference fact must be one too, or every German question would look unanswered."""
    translated = sorted(TRANSLATIONS.glob("*.json"))
    return [REFERENCE_FACTS] + [p for p in translated if not languages or p.stem in languages]


def facts(languages: frozenset[str] = frozenset()) -> list[str]:
    return [fact for path in fact_files(languages) for fact in json.loads(path.read_text())]


def vectors_file(model_dir: Path, languages: frozenset[str] = frozenset()) -> Path:
    """Where the local model's vectors of the facts are kept: named by the facts' digest, so
    that an edited list is embedded again."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in fact_files(languages)))
    return model_dir / f"reference-{digest.hexdigest()[:12]}.npy"


def write_vectors(model: OnnxSentenceModel) -> Path:
    """Embed the facts with the local model into its folder, unless done (`make model`)."""
    languages = model.model.languages
    target = vectors_file(model.model_dir, languages)
    if not target.is_file():
        temporary = target.with_suffix(".tmp.npy")
        np.save(temporary, np.asarray(model.embed(facts(languages)), dtype=np.float32))
        temporary.replace(target)  # a reader never maps a half-written file
    return target


def typical_match(vector: Sequence[float]) -> float | None:
    """The query `vector`'s closest cosine among the reference facts, in the current model's
    space; None when their vectors cannot be made (a hosted model that fails: the score goes
    without the answer gap, and the failure is logged)."""
    matrix = _matrix()
    if matrix is None:
        return None
    query = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    return float((matrix @ query).max() / norm) if norm else 0.0


def _matrix() -> np.ndarray | None:
    global _vectors  # noqa: PLW0603 - one model per process, its vectors with it
    embedder = get_embedder()
    made = _vectors
    if made is not None and made[0] is embedder and (made[1] is not None or _recent(made[2])):
        return made[1]
    with _lock:
        made = _vectors
        if made is None or made[0] is not embedder or (made[1] is None and not _recent(made[2])):
            try:
                raw = _load(embedder)
            except Exception:
                logger.exception("the reference facts could not be embedded")
                _vectors = embedder, None, time.monotonic()
                return None
            unit = raw / np.clip(np.linalg.norm(raw, axis=1, keepdims=True), 1e-12, None)
            made = _vectors = embedder, unit.astype(np.float32), time.monotonic()
        return made[1]


def _recent(failed_at: float) -> bool:
    return time.monotonic() - failed_at < RETRY_SECONDS


def _load(embedder: Embedder) -> np.ndarray:
    if isinstance(embedder, OnnxSentenceModel):
        languages = embedder.model.languages
        kept = vectors_file(embedder.model_dir, languages)
        if kept.is_file():
            loaded = np.asarray(np.load(kept), dtype=np.float32)
            if loaded.shape == (len(facts(languages)), embedder.dimensions):
                return loaded
        return np.asarray(embedder.embed(facts(languages)), dtype=np.float32)
    # A hosted model: its languages are its own (every translation).
    return np.asarray(embedder.embed(facts()), dtype=np.float32)
