#!/usr/bin/env bash
# One affinity run: vllm-router with POLICY in front of two running vLLM replicas, our
# server (already running, upstream = the router's URL) in front of it, then
# `agentic-api bench continuations` through our server and attribution of every request to
# the replica that served it (attribute.py). See docs/benchmarks/affinity/README.md.
#
#   docs/benchmarks/affinity/run_affinity.sh POLICY NAME [CONCURRENCY] [PAIRS]
#
# Environment (defaults in brackets):
#   ROUTER        vllm-router executable [~/.cache/agentic-api/router-venv/bin/vllm-router]
#   ROUTER_PORT   [19720]  (our server's AGENTIC_UPSTREAM_BASE_URL must point here)
#   PROM_PORT     router's Prometheus port, bound to 127.0.0.1 [19729]
#   R1_PORT R2_PORT  the replicas, started with scripts/real_vllm/start.sh [19721 19722]
#   RUN_DIR       where start.sh wrote vllm-PORT.log [$AGENTIC_VLLM_RUN_DIR or ~/.cache/agentic-api/run]
#   SERVER_URL    our server [http://127.0.0.1:19730]
#   KEY_A KEY_B   API keys of two tenants (cycled over the pairs)
#   OUT           output folder [docs/benchmarks/affinity]
set -euo pipefail
cd "$(dirname "$0")/../../.."

POLICY="$1"
NAME="$2"
CONCURRENCY="${3:-1}"
PAIRS="${4:-20}"
ROUTER="${ROUTER:-$HOME/.cache/agentic-api/router-venv/bin/vllm-router}"
ROUTER_PORT="${ROUTER_PORT:-19720}"
PROM_PORT="${PROM_PORT:-19729}"
R1_PORT="${R1_PORT:-19721}"
R2_PORT="${R2_PORT:-19722}"
RUN_DIR="${RUN_DIR:-${AGENTIC_VLLM_RUN_DIR:-$HOME/.cache/agentic-api/run}}"
SERVER_URL="${SERVER_URL:-http://127.0.0.1:19730}"
OUT="${OUT:-docs/benchmarks/affinity}"
WORK="$(mktemp -d)"

"$ROUTER" --host 127.0.0.1 --port "$ROUTER_PORT" \
    --worker-urls "http://127.0.0.1:$R1_PORT" "http://127.0.0.1:$R2_PORT" \
    --policy "$POLICY" --prometheus-host 127.0.0.1 --prometheus-port "$PROM_PORT" \
    >"$WORK/router.log" 2>&1 </dev/null &
ROUTER_PID=$!
trap 'kill "$ROUTER_PID" 2>/dev/null; wait "$ROUTER_PID" 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 1 60); do
    curl -sf "http://127.0.0.1:$ROUTER_PORT/health" >/dev/null 2>&1 && break
    sleep 0.5
done

# Snapshot: log sizes (attribute.py reads only what comes after) and counters.
for replica in r1:"$R1_PORT" r2:"$R2_PORT"; do
    name="${replica%%:*}"; port="${replica##*:}"
    stat -c %s "$RUN_DIR/vllm-$port.log" >"$WORK/$name.offset"
    curl -sf "http://127.0.0.1:$port/metrics" >"$WORK/$name.before.prom"
done

.venv/bin/agentic-api bench continuations --url "$SERVER_URL" \
    --api-key "$KEY_A" --api-key "$KEY_B" \
    --pairs "$PAIRS" --prompt-words 500 --followup-words 40 --max-output-tokens 16 \
    --block-size 32 --concurrency "$CONCURRENCY" --out "$OUT" --name "$NAME"

sleep 1  # let the last request's log line and counters land
for replica in r1:"$R1_PORT" r2:"$R2_PORT"; do
    name="${replica%%:*}"; port="${replica##*:}"
    curl -sf "http://127.0.0.1:$port/metrics" >"$WORK/$name.after.prom"
done

.venv/bin/python docs/benchmarks/affinity/attribute.py \
    --csv "$OUT/$NAME.csv" --json "$OUT/$NAME.json" --work "$WORK" \
    --replica r1="$RUN_DIR/vllm-$R1_PORT.log" --replica r2="$RUN_DIR/vllm-$R2_PORT.log" \
    --policy "$POLICY" --concurrency "$CONCURRENCY"
