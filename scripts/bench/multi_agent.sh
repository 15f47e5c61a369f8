#!/usr/bin/env bash
# bench agents --multi-agent on real CPU vLLMs serving SmolLM2-135M-Instruct, our server in
# front of them on SQLite; the run's JSON and table go to OUT.
#
#   scripts/bench/multi_agent.sh [OUT]        (default docs/benchmarks/multi_agent)
#
# Environment: LEADS (2), TURNS (3), TOOL_SECONDS (1), SYSTEM_WORDS (200), MAX_OUTPUT (200),
# PORT_BASE (18900), NAME (smollm2: the run's file names), and
#   ROUTING  one: one replica, our server sends to it [one]
#            router: two replicas behind vllm-router (consistent_hash: it keeps a session
#              together by the X-Session-ID every agent of a tree carries, the root's)
#            gateway: two replicas, our server places every round itself
#              (AGENTIC_UPSTREAM_REPLICAS, their KV events followed; docs/placement.md)
# With two replicas each sits behind scripts/bench/agents_tap.py; multi_agent_taps.py then
# says from the taps' logs which replica served each request of each tree (NAME.taps.json).
# Needs scripts/real_vllm/setup.sh and setup_smollm2.sh (cached after the first time); the
# router arm also scripts/real_vllm/setup_router.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${1:-docs/benchmarks/multi_agent}
LEADS=${LEADS:-2} TURNS=${TURNS:-3} TOOL_SECONDS=${TOOL_SECONDS:-1}
SYSTEM_WORDS=${SYSTEM_WORDS:-200} PORT_BASE=${PORT_BASE:-18900} MAX_OUTPUT=${MAX_OUTPUT:-200}
ROUTING=${ROUTING:-one} NAME=${NAME:-smollm2}
OURS_PORT=$((PORT_BASE + 1)) ROUTER_PORT=$((PORT_BASE + 2))
WORK=$(mktemp -d /tmp/bench-multi-agent.XXXXXX)
PIDS=()
VLLM_PORTS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true; done
  for port in "${VLLM_PORTS[@]}"; do scripts/real_vllm/stop.sh "$port" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
wait_http() {
  for _ in $(seq 1 150); do curl -fs "$1" >/dev/null && return 0; sleep 0.2; done
  echo "not up: $1" >&2; return 1
}

scripts/real_vllm/setup.sh >/dev/null
MODEL_DIR=$(scripts/real_vllm/setup_smollm2.sh | tail -1 | cut -d= -f2)
smollm2() {  # a SmolLM2 vLLM on PORT, then its extra arguments
  local port=$1
  shift
  AGENTIC_VLLM_MODEL_DIR=$MODEL_DIR AGENTIC_VLLM_START_TIMEOUT=600 \
    scripts/real_vllm/start.sh "$port" smollm2 --enable-auto-tool-choice \
    --tool-call-parser hermes --enable-scale-out "$@" >/dev/null
  VLLM_PORTS+=("$port")
}

export AGENTIC_DATA_DIR=$WORK/data AGENTIC_DATABASE_URL=sqlite:///$WORK/bench.db
export AGENTIC_PORT=$OURS_PORT AGENTIC_TOKEN_ARTIFACTS=required AGENTIC_LOG_LEVEL=warning
TAPS=()
if [[ $ROUTING == one ]]; then
  smollm2 "$PORT_BASE"
  export AGENTIC_UPSTREAM_BASE_URL=http://127.0.0.1:$PORT_BASE
else
  # Replica N (1, 2): vLLM on PORT_BASE+10+N publishing its KV events on +20+N, its tap
  # on +30+N.
  replicas="" events=""
  for n in 1 2; do
    smollm2 $((PORT_BASE + 10 + n)) --kv-events-config \
      "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://127.0.0.1:$((PORT_BASE + 20 + n))\",\"topic\":\"r$n\"}"
    setsid .venv/bin/python scripts/bench/agents_tap.py --listen $((PORT_BASE + 30 + n)) \
      --upstream "http://127.0.0.1:$((PORT_BASE + 10 + n))" --name "r$n" \
      --log "$WORK/tap-r$n.jsonl" >"$WORK/tap-r$n.log" 2>&1 </dev/null &
    PIDS+=($!)
    TAPS+=("$WORK/tap-r$n.jsonl")
    wait_http "http://127.0.0.1:$((PORT_BASE + 30 + n))/health"
    replicas+="${replicas:+,}r$n=http://127.0.0.1:$((PORT_BASE + 30 + n))"
    events+="${events:+,}r$n=connect:tcp://127.0.0.1:$((PORT_BASE + 20 + n))"
  done
  export AGENTIC_KV_EVENTS_ENDPOINTS=$events
  if [[ $ROUTING == gateway ]]; then
    export AGENTIC_UPSTREAM_REPLICAS=$replicas AGENTIC_UPSTREAM_BASE_URL=http://127.0.0.1:$((PORT_BASE + 31))
  else
    ROUTER_BIN=$(scripts/real_vllm/setup_router.sh)
    setsid "$ROUTER_BIN" --host 127.0.0.1 --port "$ROUTER_PORT" --policy consistent_hash \
      --worker-urls "http://127.0.0.1:$((PORT_BASE + 31))" "http://127.0.0.1:$((PORT_BASE + 32))" \
      --prometheus-host 127.0.0.1 --prometheus-port $((PORT_BASE + 3)) \
      >"$WORK/router.log" 2>&1 </dev/null &
    PIDS+=($!)
    wait_http "http://127.0.0.1:$ROUTER_PORT/health"
    export AGENTIC_UPSTREAM_BASE_URL=http://127.0.0.1:$ROUTER_PORT
  fi
fi
.venv/bin/agentic-api migrate >/dev/null
KEY=$(.venv/bin/agentic-api tenant create bench | sed -n "s/^api key (shown once): //p")
ADMIN=$(.venv/bin/agentic-api admin-key create | sed -n "s/^admin key (shown once): //p")
setsid .venv/bin/agentic-api serve >"$WORK/server.log" 2>&1 </dev/null &
PIDS+=($!)
wait_http "http://127.0.0.1:$OURS_PORT/health"

.venv/bin/agentic-api bench agents --multi-agent --url "http://127.0.0.1:$OURS_PORT" \
  --api-key "$KEY" --admin-key "$ADMIN" --agents "$LEADS" --turns "$TURNS" \
  --tool-seconds "$TOOL_SECONDS" --system-words "$SYSTEM_WORDS" --max-output-tokens "$MAX_OUTPUT" \
  --nonce "$NAME-$(date +%s)" --out "$OUT" --name "$NAME"
if [[ ${#TAPS[@]} -gt 0 ]]; then
  .venv/bin/python scripts/bench/multi_agent_taps.py "${TAPS[@]}" | tee "$OUT/$NAME.taps.json"
  curl -fs "http://127.0.0.1:$OURS_PORT/metrics" | grep -E "^agentic_placements_total" \
    >"$OUT/$NAME.ours.prom" || true
fi
