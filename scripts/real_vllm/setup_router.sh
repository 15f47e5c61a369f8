#!/usr/bin/env bash
# A vllm-router for the real_vllm tier (a real router in front of the replicas).
#
#   scripts/real_vllm/setup_router.sh      -> prints the vllm-router executable
#
# Idempotent: a virtualenv at ${AGENTIC_ROUTER_VENV:-$HOME/.cache/agentic-api/router-venv}
# with vllm-router==${AGENTIC_ROUTER_VERSION:-0.1.17} (a Rust binary in a wheel, seconds).
set -euo pipefail

VENV="${AGENTIC_ROUTER_VENV:-$HOME/.cache/agentic-api/router-venv}"
VERSION="${AGENTIC_ROUTER_VERSION:-0.1.17}"
BIN="$VENV/bin/vllm-router"

# grep without -q: -q stops reading at the match, pip then dies of SIGPIPE, and under
# pipefail the check failed every time (a reinstall on every call).
if [[ -x "$BIN" ]] && "$VENV/bin/python" -m pip show vllm-router 2>/dev/null | grep -x "Version: $VERSION" >/dev/null; then
    echo "$BIN"
    exit 0
fi
mkdir -p "$(dirname "$VENV")"
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
"$VENV/bin/python" -m pip install --quiet "vllm-router==${VERSION}" >&2
echo "$BIN"
