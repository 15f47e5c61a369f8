#!/usr/bin/env bash
# bench agents --multi-agent on a real CPU vLLM serving SmolLM2-135M-Instruct (one
# replica), our server in front of it on SQLite; the run's JSON and table go to OUT.
#
#   scripts/bench/multi_agent.sh [OUT]        (default docs/benchmarks/multi_agent)
#
# Environment: LEADS (2), TURNS (3), TOOL_SECONDS (1), SYSTEM_WORDS (200), MAX_OUTPUT (200),
# PORT_BASE (18900).
# Needs scripts/real_vllm/setup.sh and setup_smollm2.sh (cached after the first time).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${1:-docs/benchmarks/multi_agent}
LEADS=${LEADS:-2} TURNS=${TURNS:-3} TOOL_SECONDS=${TOOL_SECONDS:-1}
SYSTEM_WORDS=${SYSTEM_WORDS:-200} PORT_BASE=${PORT_BASE:-18900} MAX_OUTPUT=${MAX_OUTPUT:-200}
VLLM_PORT=$PORT_BASE OURS_PORT=$((PORT_BASE + 1))
WORK=$(mktemp -d /tmp/bench-multi-agent.XXXXXX)
OURS_PID=""
cleanup() {
  [[ -n "$OURS_PID" ]] && kill "$OURS_PID" 2>/dev/null || true
  scripts/real_vllm/stop.sh "$VLLM_PORT" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

scripts/real_vllm/setup.sh >/dev/null
MODEL_DIR=$(scripts/real_vllm/setup_smollm2.sh | tail -1 | cut -d= -f2)
AGENTIC_VLLM_MODEL_DIR=$MODEL_DIR AGENTIC_VLLM_START_TIMEOUT=600 \
  scripts/real_vllm/start.sh "$VLLM_PORT" smollm2 --enable-auto-tool-choice \
  --tool-call-parser hermes --enable-scale-out >/dev/null

export AGENTIC_DATA_DIR=$WORK/data AGENTIC_DATABASE_URL=sqlite:///$WORK/bench.db
export AGENTIC_UPSTREAM_BASE_URL=http://127.0.0.1:$VLLM_PORT AGENTIC_PORT=$OURS_PORT
export AGENTIC_TOKEN_ARTIFACTS=required AGENTIC_LOG_LEVEL=warning
.venv/bin/agentic-api migrate >/dev/null
KEY=$(.venv/bin/agentic-api tenant create bench | sed -n "s/^api key (shown once): //p")
ADMIN=$(.venv/bin/agentic-api admin-key create | sed -n "s/^admin key (shown once): //p")
.venv/bin/agentic-api serve >"$WORK/server.log" 2>&1 &
OURS_PID=$!
for _ in $(seq 1 150); do curl -fs "http://127.0.0.1:$OURS_PORT/health" >/dev/null && break; sleep 0.2; done

.venv/bin/agentic-api bench agents --multi-agent --url "http://127.0.0.1:$OURS_PORT" \
  --api-key "$KEY" --admin-key "$ADMIN" --agents "$LEADS" --turns "$TURNS" \
  --tool-seconds "$TOOL_SECONDS" --system-words "$SYSTEM_WORDS" --max-output-tokens "$MAX_OUTPUT" \
  --out "$OUT" --name smollm2
