#!/usr/bin/env bash
# The cost of tracing per turn, end to end: one `bench overhead` run against three of our
# servers side by side over one simulator, the targets taking turns batch by batch:
#   off     this tree, tracing not configured (no OTEL_* variable)
#   on      this tree, exporting every span to Arize Phoenix on loopback
#           (OTEL_EXPORTER_OTLP_ENDPOINT; the SDK's default batch processor)
#   before  the commit before tracing existed (ca46686^), tracing absent
#   traced  the commit that added tracing (ca46686), tracing off: `before` vs `traced` is
#           that commit's own cost, the 40-odd commits since left out
# (COMMITS: the NAME=COMMIT pairs of the last two, run from `git archive` copies with this
# tree's venv), with each server's pid, so that the bench reports their CPU per turn.
#
#   scripts/bench/tracing.sh [NAME] [CONCURRENCY] [DEPTHS] [PROBES]
#
# Env: OUT (default docs/benchmarks/tracing), WORKERS (default auto), COMMITS (default
# "before=ca46686^ traced=ca46686"; "" leaves them out), BASE_PORT (default 18760: the
# simulator, then off +1, on +3, Phoenix +5, its gRPC +6, the commits +7 on), KEEP_WORK=1. Phoenix comes from
# scripts/tracing/setup_phoenix.sh (installed the first time). SQLite for every server.
set -euo pipefail
cd "$(dirname "$0")/../.."

NAME=${1:-tracing_sim_sqlite_c1}
CONC=${2:-1}
DEPTHS=${3:-10,40}
PROBES=${4:-60}
OUT=${OUT:-docs/benchmarks/tracing}
DB=sqlite
WORKERS=${WORKERS:-auto}
COMMITS=${COMMITS-before=ca46686^ traced=ca46686}
BASE_PORT=${BASE_PORT:-18760}
PEER=
PHOENIX_VENV=$(scripts/tracing/setup_phoenix.sh | sed -n 's/^AGENTIC_PHOENIX_VENV=//p')
ROOT=$PWD
source scripts/bench/servers.sh
# The simulator and `off` (our server as servers.sh starts it, no OTEL_* set).
unset "${!OTEL_@}"
start_servers agentic-bench-tracing agentic_bench_tracing --decode-seconds-per-token 0.002
targets=(--target "off=http://127.0.0.1:$OURS_PORT" --pid "off=$OURS_PID")
keys=(--api-key "off=$KEY")

ON_PORT=$((BASE_PORT + 3)) PHOENIX_PORT=$((BASE_PORT + 5))
mkdir -p "$WORK/phoenix"
PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=$PHOENIX_PORT PHOENIX_GRPC_PORT=$((BASE_PORT + 6)) \
  PHOENIX_WORKING_DIR=$WORK/phoenix PHOENIX_TELEMETRY_ENABLED=false \
  "$PHOENIX_VENV/bin/phoenix" serve >"$WORK/phoenix.log" 2>&1 &
BENCH_PIDS+=($!)

# A server of this tree (or of BEFORE's, run from its own folder) with its own data dir.
# Prints "PID KEY".
serve_one() {
  local name=$1 port=$2 tree=$3
  shift 3
  (
    cd "$tree"
    export AGENTIC_DATA_DIR=$WORK/$name AGENTIC_PORT=$port "$@"
    key=$("$ROOT/.venv/bin/python" -m agentic_api.cli tenant create bench \
      | sed -n "s/^api key (shown once): //p")
    "$ROOT/.venv/bin/python" -m agentic_api.cli serve >"$WORK/$name.log" 2>&1 &
    echo "$! $key"
  )
}

# Phoenix migrates its database before it listens: ~30 s on a loaded 2-core machine.
for _ in $(seq 1 600); do curl -fs "http://127.0.0.1:$PHOENIX_PORT/healthz" >/dev/null && break; sleep 0.2; done
wait_http "http://127.0.0.1:$PHOENIX_PORT/healthz"
read -r ON_PID ON_KEY < <(serve_one on "$ON_PORT" "$ROOT" \
  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$PHOENIX_PORT \
  OTEL_RESOURCE_ATTRIBUTES=openinference.project.name=bench)
BENCH_PIDS+=($ON_PID)
wait_http "http://127.0.0.1:$ON_PORT/health"
targets+=(--target "on=http://127.0.0.1:$ON_PORT" --pid "on=$ON_PID")
keys+=(--api-key "on=$ON_KEY")

port=$((BASE_PORT + 7))
for pair in $COMMITS; do
  name=${pair%%=*} commit=${pair#*=}
  mkdir -p "$WORK/$name-tree"
  git archive "$commit" | tar -x -C "$WORK/$name-tree"
  read -r pid key < <(serve_one "$name" "$port" "$WORK/$name-tree")
  BENCH_PIDS+=($pid)
  wait_http "http://127.0.0.1:$port/health"
  targets+=(--target "$name=http://127.0.0.1:$port" --pid "$name=$pid")
  keys+=(--api-key "$name=$key")
  port=$((port + 1))
done

.venv/bin/agentic-api bench overhead --direct "http://127.0.0.1:$SIM_PORT" "${targets[@]}" \
  "${keys[@]}" --depths "$DEPTHS" --probes "$PROBES" --concurrency "$CONC" \
  --out "$OUT" --name "$NAME"

# What Phoenix received (after the batch processor's 5 s schedule): `on` exported its turns.
sleep 6
curl -s "http://127.0.0.1:$PHOENIX_PORT/v1/projects"; echo
curl -s "http://127.0.0.1:$PHOENIX_PORT/v1/projects/bench/spans?limit=1000&name=POST%20/v1/responses" \
  | "$PHOENIX_VENV/bin/python" -c 'import json,sys; print("phoenix stored", len(json.load(sys.stdin)["data"]), "server spans (first 1000)")'
