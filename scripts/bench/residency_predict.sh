#!/usr/bin/env bash
# Does residency predict the next continuation's hit or miss? A real tiny vLLM (CPU, a
# 2,048-token KV cache, KV events on ipc://), our server in front of it (SQLite, one
# worker, token artifacts required, subscribed to the events), then
# `scripts/bench/residency.py --predict` (docs/benchmarks/residency/README.md).
#
#   scripts/bench/residency_predict.sh [--out FILE] [--rounds N] [--seed S] ...
#
# REPORT_MODE=full sends vllm_xargs.kv_cache_report_mode=full (AGENTIC_KV_EVENTS_REPORT_REUSE).
# PORT (default 18710) is vLLM's, PORT+1 ours. KV_ENDPOINT=ipc://... reuses a vLLM already
# running on PORT with those events (started as below), left running. Everything this
# script started is stopped at exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

PORT=${PORT:-18710}
OURS=$((PORT + 1))
WORK=$(mktemp -d /tmp/respred.XXXXXX)
export AGENTIC_VLLM_RUN_DIR=$WORK/vllm
OURS_PID=

cleanup() {
  [[ -n "$OURS_PID" ]] && kill "$OURS_PID" 2>/dev/null && wait "$OURS_PID" 2>/dev/null
  [[ -z "${KV_ENDPOINT:-}" ]] && scripts/real_vllm/stop.sh "$PORT" >/dev/null 2>&1
  if [[ -n "${KEEP_WORK:-}" ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

ENDPOINT=${KV_ENDPOINT:-ipc://$WORK/kv.ipc}
if [[ -z "${KV_ENDPOINT:-}" ]]; then
  scripts/real_vllm/setup.sh >/dev/null
  AGENTIC_VLLM_KVCACHE_GB=none AGENTIC_VLLM_START_TIMEOUT=${AGENTIC_VLLM_START_TIMEOUT:-600} \
    scripts/real_vllm/start.sh "$PORT" tiny-llama \
    --max-model-len 1024 --kv-cache-memory-bytes 2097152 \
    --kv-events-config "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"$ENDPOINT\",\"topic\":\"replica-a\"}" \
    >/dev/null
fi

export AGENTIC_DATA_DIR=$WORK/ours AGENTIC_UPSTREAM_BASE_URL=http://127.0.0.1:$PORT
export AGENTIC_PORT=$OURS AGENTIC_HTTP_WORKERS=1 AGENTIC_LOG_LEVEL=warning
export AGENTIC_KV_EVENTS_ENDPOINTS=replica-a=$ENDPOINT AGENTIC_TOKEN_ARTIFACTS=required
if [[ "${REPORT_MODE:-incremental}" == "full" ]]; then export AGENTIC_KV_EVENTS_REPORT_REUSE=1; fi
KEY=$(.venv/bin/agentic-api tenant create bench | sed -n "s/^api key (shown once): //p")
ADMIN=$(.venv/bin/agentic-api admin-key create | sed -n "s/^admin key (shown once): //p")
.venv/bin/agentic-api serve >"$WORK/ours.log" 2>&1 &
OURS_PID=$!
up=
for _ in $(seq 1 600); do
  if curl -fs "http://127.0.0.1:$OURS/health" >/dev/null 2>&1; then up=1; break; fi
  sleep 0.2
done
[[ -n "$up" ]] || { echo "our server did not start:" >&2; cat "$WORK/ours.log" >&2; exit 1; }

.venv/bin/python scripts/bench/residency.py --predict "http://127.0.0.1:$OURS" \
  --api-key "$KEY" --admin-key "$ADMIN" "$@"
