#!/usr/bin/env bash
# Start the tiny real vLLM in the background and wait until /health answers.
#
#   scripts/real_vllm/start.sh PORT [SERVED_NAME] [EXTRA vLLM ARGS...]
#
# Needs scripts/real_vllm/setup.sh first. Writes
#   ${AGENTIC_VLLM_RUN_DIR:-$HOME/.cache/agentic-api/run}/vllm-PORT.pid  (pid)
#   ${AGENTIC_VLLM_RUN_DIR:-$HOME/.cache/agentic-api/run}/vllm-PORT.log  (log)
# and prints the base URL (http://127.0.0.1:PORT) on stdout. Stop it with
# scripts/real_vllm/stop.sh PORT (or with no argument: every instance started here).
#
# Useful extra args (vLLM 0.32):
#   --kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv"}'
# Environment: AGENTIC_VLLM_START_TIMEOUT (seconds, default 180),
#   AGENTIC_VLLM_KVCACHE_GB (VLLM_CPU_KVCACHE_SPACE, default 1; "none" leaves it unset, so
#   that --kv-cache-memory-bytes N takes effect: the variable would override the flag),
#   AGENTIC_VLLM_BLOCK_SIZE (default 32: vLLM's CPU attention only takes multiples of 32;
#   --block-size 16 fails at start-up with "No common block size for 16"),
#   AGENTIC_VLLM_PROGRESS=1 (every 10 s while waiting: the time so far and the log's last line),
#   AGENTIC_VLLM_STARTED_PID_FILE (also writes the started vLLM's pid there).
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 PORT [SERVED_NAME] [EXTRA vLLM ARGS...]" >&2
    exit 2
fi
PORT="$1"; shift
NAME="${1:-tiny-llama}"; [[ $# -gt 0 ]] && shift

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${AGENTIC_VLLM_VENV:-$HOME/.cache/agentic-api/vllm-venv}"
MODEL_DIR="${AGENTIC_VLLM_MODEL_DIR:-$HOME/.cache/agentic-api/tiny-llama}"
RUN_DIR="${AGENTIC_VLLM_RUN_DIR:-$HOME/.cache/agentic-api/run}"
TIMEOUT="${AGENTIC_VLLM_START_TIMEOUT:-180}"
PID_FILE="$RUN_DIR/vllm-$PORT.pid"
LOG_FILE="$RUN_DIR/vllm-$PORT.log"
URL="http://127.0.0.1:$PORT"

if [[ ! -x "$VENV/bin/python" || ! -f "$MODEL_DIR/config.json" ]]; then
    echo "real vLLM not set up: run scripts/real_vllm/setup.sh" >&2
    exit 1
fi
mkdir -p "$RUN_DIR"

if [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
    echo "vLLM already running on port $PORT (pid $(cat "$PID_FILE"))" >&2
    exit 1
fi

health() { "$VENV/bin/python" - "$URL/health" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

if health; then
    echo "something already answers on $URL" >&2
    exit 1
fi

KV_SPACE="${AGENTIC_VLLM_KVCACHE_GB:-1}"
if [[ "$KV_SPACE" == "none" ]]; then
    unset VLLM_CPU_KVCACHE_SPACE
else
    export VLLM_CPU_KVCACHE_SPACE="$KV_SPACE"
fi

# setsid: own process group, so stop.sh can end the API server and its engine core together.
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    setsid "$VENV/bin/python" "$HERE/launcher.py" serve "$MODEL_DIR" \
    --host 127.0.0.1 --port "$PORT" \
    --served-model-name "$NAME" \
    --enable-prefix-caching --enable-prompt-tokens-details \
    --max-model-len 2048 --dtype float32 --enforce-eager --block-size "${AGENTIC_VLLM_BLOCK_SIZE:-32}" \
    "$@" >"$LOG_FILE" 2>&1 </dev/null &
PID=$!
echo "$PID" >"$PID_FILE"
# For a caller that must tell the vLLM it started from one started by someone else.
if [[ -n "${AGENTIC_VLLM_STARTED_PID_FILE:-}" ]]; then
    echo "$PID" >"$AGENTIC_VLLM_STARTED_PID_FILE"
fi

start=$(date +%s)
last_progress=$start
while true; do
    if health; then
        echo "vLLM up on $URL (pid $PID, $(( $(date +%s) - start )) s, log $LOG_FILE)" >&2
        echo "$URL"
        exit 0
    fi
    if ! kill -0 "$PID" 2>/dev/null; then
        echo "vLLM exited during start-up; log tail ($LOG_FILE):" >&2
        tail -n 60 "$LOG_FILE" >&2
        rm -f "$PID_FILE"
        exit 1
    fi
    if (( $(date +%s) - start >= TIMEOUT )); then
        echo "vLLM not healthy after ${TIMEOUT} s; log tail ($LOG_FILE):" >&2
        tail -n 60 "$LOG_FILE" >&2
        "$HERE/stop.sh" "$PORT" >&2 || true
        exit 1
    fi
    if [[ "${AGENTIC_VLLM_PROGRESS:-0}" == "1" ]] && (( $(date +%s) - last_progress >= 10 )); then
        last_progress=$(date +%s)
        echo "  loading, $(( last_progress - start )) s: $(tail -n 1 "$LOG_FILE" | cut -c1-110)" >&2
    fi
    sleep 1
done
