"""Quantize the exported model's weights to int8: the copy search queries are embedded with.

Run by scripts/export-model.sh (and the Docker image's model stage) in a throw-away venv with
onnx, onnxruntime, numpy and protobuf pinned (QUANTIZE_PACKAGES there): the result is checked
against its sha256 pin in memory/model.sha256, and the same versions give the same bytes.
Per-channel int8 weights keep the query vectors within cosine 0.99 of the full model's; one
scale per tensor fell to 0.76 on some texts (docs/benchmarks.md). Usage:

    python quantize_model.py MODEL_DIR   # reads model.onnx, writes model-int8.onnx
"""

from __future__ import annotations

import sys
from pathlib import Path

from onnxruntime.quantization import QuantType, quantize_dynamic


def main() -> None:
    model_dir = Path(sys.argv[1])
    quantize_dynamic(
        model_dir / "model.onnx",
        model_dir / "model-int8.onnx",
        weight_type=QuantType.QInt8,
        per_channel=True,
    )


if __name__ == "__main__":
    main()
