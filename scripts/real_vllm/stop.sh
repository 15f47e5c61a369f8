#!/usr/bin/env bash
# Stop a vLLM started by start.sh.
#
#   scripts/real_vllm/stop.sh [PORT]     (no PORT: every instance with a pid file)
#
# Sends SIGTERM to the process group start.sh created (API server + engine core), waits up
# to 30 s, then SIGKILL. Removes the pid file. Always exits 0 when nothing is running.
set -uo pipefail

RUN_DIR="${AGENTIC_VLLM_RUN_DIR:-$HOME/.cache/agentic-api/run}"

if [[ $# -ge 1 ]]; then
    PID_FILES=("$RUN_DIR/vllm-$1.pid")
else
    shopt -s nullglob
    PID_FILES=("$RUN_DIR"/vllm-*.pid)
fi

alive() { kill -0 "$1" 2>/dev/null || kill -0 -- "-$1" 2>/dev/null; }

for pid_file in "${PID_FILES[@]}"; do
    [[ -f "$pid_file" ]] || continue
    pid="$(cat "$pid_file")"
    if [[ -n "$pid" ]] && alive "$pid"; then
        # start.sh runs vLLM under setsid, so its pid is also its process group id.
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 60); do
            alive "$pid" || break
            sleep 0.5
        done
        if alive "$pid"; then
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
            sleep 0.5
        fi
        echo "stopped vLLM pid $pid ($(basename "$pid_file"))" >&2
    fi
    rm -f "$pid_file"
done
exit 0
