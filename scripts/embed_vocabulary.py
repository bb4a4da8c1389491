"""Embed the tokenizer's whole words once, beside the model: search matches a query's words
against the scope's entity names by meaning (memory.retrieval.search), and a word found here
costs a lookup instead of a model run (about 1 ms a word on these machines). And the reference
facts a query is compared with (memory.text.reference: MODEL_DIR/reference-<digest>.npy, about
1 s), so that no process embeds them on its first search.

Writes MODEL_DIR/words.txt (one word a line) and MODEL_DIR/words.npy (their float32 vectors, in
the same order; the server maps it read-only, so its pages are shared by every process). The
words are the tokenizer's vocabulary entries of two or more lower-case letters, about 21,700;
about 5 s on 2 cores (all-mpnet-base-v2: about 80 s). Skipped when both files are there and
agree. Run by `make model`, for the local model named (all-MiniLM-L6-v2 by default).

    .venv/bin/python scripts/embed_vocabulary.py MODEL_DIR [MODEL_NAME]
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from django.conf import settings

settings.configure()  # nothing of the project's settings is needed, nor its secrets

from memory.text import reference  # noqa: E402 - after settings.configure()
from memory.text.embeddings import (  # noqa: E402
    DEFAULT_LOCAL_MODEL,
    LOCAL_MODELS,
    VOCABULARY_VECTORS,
    VOCABULARY_WORDS,
    OnnxSentenceModel,
)

WORD = re.compile(r"[a-z]{2,}")
LETTERS = re.compile(r"[^\W\d_]{2,}")
# A Unigram vocabulary's most likely word-starting pieces embedded (about 4 minutes on 2 cores
# for multilingual-e5-small); the rest are embedded when a query has them.
UNIGRAM_WORDS = 30_000


def whole_words(tokenizer: dict[str, object]) -> list[str]:
    """The tokenizer's whole words: a WordPiece vocabulary's lower-case words of two letters or
    more (MiniLM's, mpnet's); of a Unigram one (XLM-RoBERTa's, multilingual-e5-small's: 250,000
    pieces in about 100 languages), the UNIGRAM_WORDS most likely pieces that start a word and
    are two letters or more of any script."""
    vocabulary = tokenizer["vocab"]
    if tokenizer.get("type") != "Unigram":
        return sorted(w for w in vocabulary if WORD.fullmatch(w))  # type: ignore[attr-defined]
    starts = [
        (score, piece[1:])
        for piece, score in vocabulary  # type: ignore[attr-defined]
        if piece.startswith("\u2581") and LETTERS.fullmatch(piece[1:])
    ]
    best = sorted(starts, key=lambda s: (-s[0], s[1]))[:UNIGRAM_WORDS]
    return sorted({word for _, word in best})


def main() -> None:
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] not in LOCAL_MODELS):
        sys.exit(__doc__)
    model_dir = Path(sys.argv[1])
    spec = LOCAL_MODELS[sys.argv[2] if len(sys.argv) == 3 else DEFAULT_LOCAL_MODEL]
    model = OnnxSentenceModel(model_dir, threads=os.cpu_count() or 1, model=spec)
    if not reference.vectors_file(model_dir, spec.languages).is_file():
        print(f"embed-vocabulary: embedding the reference facts into {model_dir} (one-time)")
        reference.write_vectors(model)
    words_file, vectors_file = model_dir / VOCABULARY_WORDS, model_dir / VOCABULARY_VECTORS
    if words_file.is_file() and vectors_file.is_file():
        count = len(words_file.read_text().splitlines())
        if np.load(vectors_file, mmap_mode="r").shape == (count, spec.dimensions):
            return
    words = whole_words(json.loads((model_dir / "tokenizer.json").read_text())["model"])
    print(f"embed-vocabulary: embedding {len(words)} words into {vectors_file} (one-time)")
    vectors = model.embed(words)
    # Written under temporary names, then moved: a server never maps a half-written file.
    np.save(vectors_file.with_suffix(".tmp.npy"), vectors)
    words_file.with_suffix(".tmp").write_text("\n".join(words) + "\n")
    vectors_file.with_suffix(".tmp.npy").replace(vectors_file)
    words_file.with_suffix(".tmp").replace(words_file)


if __name__ == "__main__":
    main()
