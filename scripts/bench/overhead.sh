#!/usr/bin/env bash
# One `bench overhead` run, end to end: the simulator (with a latency model), our server and
# (if installed) the agentic-api 0.9.0 peer, each on its own loopback port, then the bench,
# with both servers' pids so that it reports their CPU per turn.
#
#   scripts/bench/overhead.sh [NAME] [CONCURRENCY] [DEPTHS] [PROBES]
#
# Env: OUT (default docs/benchmarks/overhead), DB (sqlite | postgres; default sqlite), WORKERS (our
# HTTP workers, default auto: the server's own default), PEER (default:
# ~/.cache/agentic-api/peer-venv, set to "" to leave it out; install: python3 -m venv DIR &&
# DIR/bin/pip install agentic-api==0.9.0), BASE_PORT (default 18700: the simulator, ours +1,
# the peer +2), KEEP_WORK=1 (keep the servers' logs). The servers: scripts/bench/servers.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."

NAME=${1:-overhead_sim_sqlite_c1}
CONC=${2:-1}
DEPTHS=${3:-10,40,200}
PROBES=${4:-40}
OUT=${OUT:-docs/benchmarks/overhead}
DB=${DB:-sqlite}
WORKERS=${WORKERS:-auto}
PEER=${PEER-$HOME/.cache/agentic-api/peer-venv}
BASE_PORT=${BASE_PORT:-18700}
source scripts/bench/servers.sh
start_servers agentic-bench agentic_bench --decode-seconds-per-token 0.002

.venv/bin/agentic-api bench overhead --direct "http://127.0.0.1:$SIM_PORT" "${targets[@]}" \
  --api-key "ours=$KEY" --depths "$DEPTHS" --probes "$PROBES" --concurrency "$CONC" \
  --out "$OUT" --name "$NAME"
