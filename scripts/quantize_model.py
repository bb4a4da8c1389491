"""Quantize the exported model's weights to int8: the copy search queries are embedded with.

Run by scripts/export-model.sh (and the Docker image's model stage) in a throw-away venv with
onnx, onnxruntime, numpy and protobuf pinned (QUANTIZE_PACKAGES there): the result is checked
against its sha256 pin in memory/model-pins/, and the same versions give the same bytes.
Per-channel int8 weights keep all-MiniLM-L6-v2's query vectors within cosine 0.99 of the full
model's; one scale per tensor fell to 0.76 on some texts (docs/benchmarks.md). all-mpnet-base-v2
keeps each feed-forward block's second matrix (its input, after the GELU, has outliers) in full
precision: quantized too, its query vectors fell to cosine 0.94 (median) of the full model's;
kept, 0.994. Usage:

    python quantize_model.py MODEL_DIR [MODEL]   # reads model.onnx, writes model-int8.onnx
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

# The MatMul nodes of all-mpnet-base-v2 left in full precision: /model/encoder/layer.N/output/dense
# (not .../attention/output/dense).
FULL_PRECISION = {"all-mpnet-base-v2": "/output/dense/MatMul"}


def main() -> None:
    model_dir = Path(sys.argv[1])
    name = sys.argv[2] if len(sys.argv) > 2 else "all-MiniLM-L6-v2"
    excluded: list[str] = []
    if name in FULL_PRECISION:
        graph = onnx.load(str(model_dir / "model.onnx"), load_external_data=False).graph
        excluded = [
            node.name
            for node in graph.node
            if node.name.endswith(FULL_PRECISION[name]) and "/attention/" not in node.name
        ]
    quantize_dynamic(
        model_dir / "model.onnx",
        model_dir / "model-int8.onnx",
        weight_type=QuantType.QInt8,
        per_channel=True,
        nodes_to_exclude=excluded,
    )


if __name__ == "__main__":
    main()
