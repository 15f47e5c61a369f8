#!/usr/bin/env bash
# One `bench streaming` run, end to end: the simulator (a fixed reply length and a decode
# rate), our server and (if installed) the agentic-api 0.9.0 peer, each on its own loopback
# port, then the bench, with both servers' pids so that it reports their CPU per event.
#
#   scripts/bench/streaming.sh [NAME] [STREAMS] [OUTPUT_TOKENS] [DECODE_S_PER_TOKEN] [ROUNDS]
#
# DECODE_S_PER_TOKEN: the simulator's decode time per generated token (0.005 = 200 tokens/s
# per stream, real time; 0 = as fast as it can). Env: PREFILL (the simulator's prefill time
# per uncached prompt token, default 0.00005), OUT (default docs/benchmarks/streaming), DB
# (sqlite | postgres; default sqlite), WORKERS (our HTTP workers, default auto: the
# server's own default), PEER (default:
# ~/.cache/agentic-api/peer-venv, set to "" to leave it out; install: python3 -m venv DIR &&
# DIR/bin/pip install agentic-api==0.9.0), BASE_PORT (default 18720: the simulator, ours +1,
# the peer +2), KEEP_WORK=1 (keep the servers' logs). The servers: scripts/bench/servers.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."

NAME=${1:-streaming_sim_sqlite_rt}
STREAMS=${2:-48}
TOKENS=${3:-200}
DECODE=${4:-0.005}
ROUNDS=${5:-3}
OUT=${OUT:-docs/benchmarks/streaming}
DB=${DB:-sqlite}
WORKERS=${WORKERS:-auto}
PEER=${PEER-$HOME/.cache/agentic-api/peer-venv}
BASE_PORT=${BASE_PORT:-18720}
source scripts/bench/servers.sh
# Every reply is TOKENS text tokens (one delta each) and the end-of-sequence token.
start_servers agentic-bench-streaming agentic_bench_streaming \
  --decode-seconds-per-token "$DECODE" --default-reply-tokens "$TOKENS" \
  --prefill-seconds-per-token "${PREFILL:-0.00005}"

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/agentic-api bench streaming --direct "http://127.0.0.1:$SIM_PORT" "${targets[@]}" \
  --api-key "ours=$KEY" --streams "$STREAMS" --output-tokens "$TOKENS" --rounds "$ROUNDS" \
  --out "$OUT" --name "$NAME"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
