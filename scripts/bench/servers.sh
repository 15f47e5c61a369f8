# Sourced by the bench scripts (overhead.sh, streaming.sh): the simulator, our server and
# (if installed) the agentic-api 0.9.0 peer, each on its own loopback port, all stopped
# (and their work folder removed, unless KEEP_WORK is set) when the script exits.
#
#   start_servers WORK_PREFIX DATABASE_NAME SIMULATOR_ARG...
#
# Reads DB (sqlite | postgres), WORKERS, PEER and BASE_PORT (see the scripts); sets
# SIM_PORT, OURS_PORT, PEER_PORT, KEY (a fresh tenant's API key), OURS_PID, PEER_PID and
# `targets` (the bench's --target, --pid and, for `before`, --api-key arguments).
#
# BEFORE=DIR (SQLite only) adds a target `before` on BASE_PORT + 3: our server run from
# another source tree (e.g. `git worktree add DIR main`, or `git archive main | tar -x -C
# DIR`), with this checkout's venv, so that a change is measured against what it changes
# in the same run, rounds rotating, rather than in two runs at different loads.
#
# PG_TOO=1 (with DB=sqlite) adds a target `ours_pg` on BASE_PORT + 4: this checkout's
# server on a fresh PostgreSQL database, so that SQLite and PostgreSQL are compared in one
# run, at one load; with BEFORE, `before_pg` too (BASE_PORT + 5).
#
# WORKERS_TOO=N adds a target `ours_wN` on BASE_PORT + 6: this checkout's server with N
# HTTP workers (on the same database as `ours`), to compare worker counts in one run.
#
# FLOOR=1 adds a target `floor` on BASE_PORT + 7: scripts/bench/relay_floor.py, a relay on
# our stack (uvicorn, uvloop, aiohttp) that passes the upstream's bytes through unparsed,
# the least a Python server can spend per streamed event.
#
# GRANIAN=1 adds a target `granian` on BASE_PORT + 8: this checkout's app (same database as
# `ours`) served by granian (a Rust HTTP server, ASGI) instead of uvicorn, one worker on
# uvloop, to measure the HTTP server's share (docs/benchmarks/streaming, "Which ASGI
# server"). granian is not a dependency: `.venv/bin/pip install 'granian[uvloop]==2.8.9'`.

wait_http() {
  for _ in $(seq 1 100); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "not up: $1" >&2
  return 1
}

_bench_cleanup() {
  for pid in "${BENCH_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "$DB" == "postgres" ]]; then
    psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $BENCH_DATABASE" || true
  fi
  for database in "${PG_TOO_DATABASES[@]}"; do
    psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $database" || true
  done
  if [[ -n "${KEEP_WORK:-}" ]]; then echo "kept $WORK (server logs)" >&2; else rm -rf "$WORK"; fi
}

# Our server (from TREE, or this checkout when empty) on a fresh PostgreSQL database.
_start_pg_target() {
  local name=$1 port=$2 tree=$3 key pid url
  url=postgresql+asyncpg://postgres@127.0.0.1:5432/${BENCH_DATABASE}_$name
  psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS ${BENCH_DATABASE}_$name"
  psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE ${BENCH_DATABASE}_$name"
  PG_TOO_DATABASES+=("${BENCH_DATABASE}_$name")
  AGENTIC_DATA_DIR=$WORK/$name AGENTIC_DATABASE_URL=$url PYTHONPATH=$tree \
    .venv/bin/agentic-api migrate >/dev/null
  key=$(AGENTIC_DATA_DIR=$WORK/$name AGENTIC_DATABASE_URL=$url PYTHONPATH=$tree \
    .venv/bin/agentic-api tenant create bench | sed -n "s/^api key (shown once): //p")
  AGENTIC_DATA_DIR=$WORK/$name AGENTIC_DATABASE_URL=$url AGENTIC_PORT=$port PYTHONPATH=$tree \
    .venv/bin/agentic-api serve >"$WORK/$name.log" 2>&1 &
  pid=$!
  BENCH_PIDS+=($pid)
  wait_http "http://127.0.0.1:$port/health"
  targets+=(--target "$name=http://127.0.0.1:$port" --pid "$name=$pid" --api-key "$name=$key")
}

start_servers() {
  local prefix=$1
  BENCH_DATABASE=$2
  shift 2
  SIM_PORT=$BASE_PORT OURS_PORT=$((BASE_PORT + 1)) PEER_PORT=$((BASE_PORT + 2))
  WORK=$(mktemp -d "/tmp/$prefix.XXXXXX")
  BENCH_PIDS=()
  PG_TOO_DATABASES=()
  trap _bench_cleanup EXIT

  .venv/bin/python -m tests.upstream_sim --port "$SIM_PORT" --model sim-model --block-size 32 \
    --max-model-len 1000000 --prefill-seconds-per-token 0.00005 "$@" \
    --max-recordings 100 --no-gc-pauses --log-level warning >"$WORK/sim.log" 2>&1 &
  BENCH_PIDS+=($!)
  wait_http "http://127.0.0.1:$SIM_PORT/health"

  export AGENTIC_DATA_DIR=$WORK/ours AGENTIC_UPSTREAM_BASE_URL=http://127.0.0.1:$SIM_PORT
  export AGENTIC_PORT=$OURS_PORT AGENTIC_HTTP_WORKERS=$WORKERS AGENTIC_LOG_LEVEL=warning
  if [[ "$DB" == "postgres" ]]; then
    psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $BENCH_DATABASE"
    psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE $BENCH_DATABASE"
    export AGENTIC_DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/$BENCH_DATABASE
    .venv/bin/agentic-api migrate >/dev/null
  fi
  KEY=$(.venv/bin/agentic-api tenant create bench | sed -n "s/^api key (shown once): //p")
  .venv/bin/agentic-api serve >"$WORK/ours.log" 2>&1 &
  OURS_PID=$!
  BENCH_PIDS+=($OURS_PID)
  wait_http "http://127.0.0.1:$OURS_PORT/health"

  targets=(--target "ours=http://127.0.0.1:$OURS_PORT" --pid "ours=$OURS_PID")
  if [[ -n "${BEFORE:-}" ]]; then
    [[ "$DB" == "sqlite" ]] || { echo "BEFORE needs DB=sqlite" >&2; return 1; }
    local before_port=$((BASE_PORT + 3)) before_key before_pid
    before_key=$(AGENTIC_DATA_DIR=$WORK/before PYTHONPATH=$BEFORE .venv/bin/agentic-api \
      tenant create bench | sed -n "s/^api key (shown once): //p")
    # PYTHONPATH comes before the editable install's finder: the other tree's package runs.
    AGENTIC_DATA_DIR=$WORK/before AGENTIC_PORT=$before_port PYTHONPATH=$BEFORE \
      .venv/bin/agentic-api serve >"$WORK/before.log" 2>&1 &
    before_pid=$!
    BENCH_PIDS+=($before_pid)
    wait_http "http://127.0.0.1:$before_port/health"
    targets+=(--target "before=http://127.0.0.1:$before_port" --pid "before=$before_pid"
      --api-key "before=$before_key")
  fi
  if [[ -n "${PG_TOO:-}" ]]; then
    [[ "$DB" == "sqlite" ]] || { echo "PG_TOO needs DB=sqlite" >&2; return 1; }
    _start_pg_target ours_pg $((BASE_PORT + 4)) ""
    [[ -z "${BEFORE:-}" ]] || _start_pg_target before_pg $((BASE_PORT + 5)) "$BEFORE"
  fi
  if [[ -n "${WORKERS_TOO:-}" ]]; then
    local workers_port=$((BASE_PORT + 6)) workers_pid
    AGENTIC_PORT=$workers_port AGENTIC_HTTP_WORKERS=$WORKERS_TOO .venv/bin/agentic-api serve \
      >"$WORK/ours_w$WORKERS_TOO.log" 2>&1 &
    workers_pid=$!
    BENCH_PIDS+=($workers_pid)
    wait_http "http://127.0.0.1:$workers_port/health"
    targets+=(--target "ours_w$WORKERS_TOO=http://127.0.0.1:$workers_port"
      --pid "ours_w$WORKERS_TOO=$workers_pid" --api-key "ours_w$WORKERS_TOO=$KEY")
  fi
  if [[ -n "${FLOOR:-}" ]]; then
    local floor_port=$((BASE_PORT + 7)) floor_pid
    .venv/bin/python scripts/bench/relay_floor.py --port "$floor_port" \
      --upstream "http://127.0.0.1:$SIM_PORT" >"$WORK/floor.log" 2>&1 &
    floor_pid=$!
    BENCH_PIDS+=($floor_pid)
    wait_http "http://127.0.0.1:$floor_port/health"
    targets+=(--target "floor=http://127.0.0.1:$floor_port" --pid "floor=$floor_pid")
  fi
  if [[ -n "${GRANIAN:-}" ]]; then
    local granian_port=$((BASE_PORT + 8)) granian_pid
    [[ -x .venv/bin/granian ]] || { echo "GRANIAN=1 needs .venv/bin/granian" >&2; return 1; }
    .venv/bin/granian --interface asgi --factory --host 127.0.0.1 --port "$granian_port" \
      --workers 1 --loop uvloop --log-level warning agentic_api.app:create_app \
      >"$WORK/granian.log" 2>&1 &
    granian_pid=$!
    BENCH_PIDS+=($granian_pid)
    wait_http "http://127.0.0.1:$granian_port/health"
    targets+=(--target "granian=http://127.0.0.1:$granian_port" --pid "granian=$granian_pid"
      --api-key "granian=$KEY")
  fi
  PEER_PID=
  if [[ -n "$PEER" && -x "$PEER/bin/agentic-server" ]]; then
    mkdir -p "$WORK/peer/home"
    HOME=$WORK/peer/home "$PEER/bin/agentic-server" --llm-api-base "http://127.0.0.1:$SIM_PORT" \
      --gateway-host 127.0.0.1 --gateway-port "$PEER_PORT" \
      --db-url "sqlite://$WORK/peer/peer.db" >"$WORK/peer.log" 2>&1 &
    PEER_PID=$!
    BENCH_PIDS+=($PEER_PID)
    wait_http "http://127.0.0.1:$PEER_PORT/health"
    targets+=(--target "peer=http://127.0.0.1:$PEER_PORT" --pid "peer=$PEER_PID")
  fi
}
