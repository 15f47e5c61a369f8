#!/usr/bin/env bash
# One `bench streaming` run, end to end: the simulator (a fixed reply length and a decode
# rate), our server and (if installed) the agentic-api 0.9.0 peer, each on its own loopback
# port, then the bench, with both servers' pids so that it reports their CPU per event.
#
#   scripts/bench/streaming.sh [NAME] [STREAMS] [OUTPUT_TOKENS] [DECODE_S_PER_TOKEN] [ROUNDS]
#
# DECODE_S_PER_TOKEN: the simulator's decode time per generated token (0.005 = 200 tokens/s
# per stream, real time; 0 = as fast as it can). Env: OUT (default docs/benchmarks), DB
# (sqlite | postgres; default sqlite), WORKERS (our HTTP workers, default auto: the server's own default), PEER (default:
# ~/.cache/agentic-api/peer-venv, set to "" to leave it out; install: python3 -m venv DIR &&
# DIR/bin/pip install agentic-api==0.9.0), BASE_PORT (default 18720: the simulator, ours +1,
# the peer +2).
set -euo pipefail
cd "$(dirname "$0")/../.."

NAME=${1:-streaming_sim_sqlite_rt}
STREAMS=${2:-48}
TOKENS=${3:-200}
DECODE=${4:-0.005}
ROUNDS=${5:-3}
OUT=${OUT:-docs/benchmarks}
DB=${DB:-sqlite}
WORKERS=${WORKERS:-auto}
PEER=${PEER-$HOME/.cache/agentic-api/peer-venv}
BASE_PORT=${BASE_PORT:-18720}
SIM_PORT=$BASE_PORT OURS_PORT=$((BASE_PORT + 1)) PEER_PORT=$((BASE_PORT + 2))
PY=.venv/bin/python

WORK=$(mktemp -d /tmp/agentic-bench-streaming.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "$DB" == "postgres" ]]; then
    psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS agentic_bench_streaming" || true
  fi
  if [[ -n "${KEEP_WORK:-}" ]]; then echo "kept $WORK (server logs)" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

wait_http() {
  for _ in $(seq 1 100); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "not up: $1" >&2
  return 1
}

# Every reply is TOKENS text tokens (one delta each) and the end-of-sequence token.
$PY -m tests.upstream_sim --port "$SIM_PORT" --model sim-model --block-size 32 \
  --max-model-len 1000000 --prefill-seconds-per-token 0.00005 \
  --decode-seconds-per-token "$DECODE" --default-reply-tokens "$TOKENS" \
  --max-recordings 100 --no-gc-pauses --log-level warning >"$WORK/sim.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$SIM_PORT/health"

export AGENTIC_DATA_DIR=$WORK/ours AGENTIC_UPSTREAM_BASE_URL=http://127.0.0.1:$SIM_PORT
export AGENTIC_PORT=$OURS_PORT AGENTIC_HTTP_WORKERS=$WORKERS AGENTIC_LOG_LEVEL=warning
if [[ "$DB" == "postgres" ]]; then
  psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS agentic_bench_streaming"
  psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE agentic_bench_streaming"
  export AGENTIC_DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/agentic_bench_streaming
  .venv/bin/agentic-api migrate >/dev/null
fi
KEY=$(.venv/bin/agentic-api tenant create bench | sed -n "s/^api key (shown once): //p")
.venv/bin/agentic-api serve >"$WORK/ours.log" 2>&1 &
OURS_PID=$!
pids+=($OURS_PID)
wait_http "http://127.0.0.1:$OURS_PORT/health"

targets=(--target "ours=http://127.0.0.1:$OURS_PORT" --pid "ours=$OURS_PID")
if [[ -n "$PEER" && -x "$PEER/bin/agentic-server" ]]; then
  mkdir -p "$WORK/peer/home"
  HOME=$WORK/peer/home "$PEER/bin/agentic-server" --llm-api-base "http://127.0.0.1:$SIM_PORT" \
    --gateway-host 127.0.0.1 --gateway-port "$PEER_PORT" \
    --db-url "sqlite://$WORK/peer/peer.db" >"$WORK/peer.log" 2>&1 &
  PEER_PID=$!
  pids+=($PEER_PID)
  wait_http "http://127.0.0.1:$PEER_PORT/health"
  targets+=(--target "peer=http://127.0.0.1:$PEER_PORT" --pid "peer=$PEER_PID")
fi

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/agentic-api bench streaming --direct "http://127.0.0.1:$SIM_PORT" "${targets[@]}" \
  --api-key "ours=$KEY" --streams "$STREAMS" --output-tokens "$TOKENS" --rounds "$ROUNDS" \
  --out "$OUT" --name "$NAME"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
