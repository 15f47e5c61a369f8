#!/usr/bin/env bash
# Prepare Arize Phoenix, the OTLP receiver of the real_tracing test tier (tests/real_tracing).
#
#   scripts/tracing/setup_phoenix.sh
#
# Idempotent and cached: a virtualenv of its own (never the project's .venv: Phoenix pins
# its own OpenTelemetry, SQLAlchemy and FastAPI) at
# ${AGENTIC_PHOENIX_VENV:-$HOME/.cache/agentic-api/phoenix-venv} with
# arize-phoenix==${AGENTIC_PHOENIX_VERSION:-20.26.1}; a marker file makes a second run a
# no-op. Prints AGENTIC_PHOENIX_VENV=... last.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib/cached_venv.sh
source "$HERE/../lib/cached_venv.sh"
VENV="${AGENTIC_PHOENIX_VENV:-$HOME/.cache/agentic-api/phoenix-venv}"
VERSION="${AGENTIC_PHOENIX_VERSION:-20.26.1}"
PYTHON="${AGENTIC_PHOENIX_PYTHON:-python3}"

KEY="$(venv_key "$PYTHON" "arize-phoenix==${VERSION}")"
MARKER="$VENV/.agentic-phoenix-ready"

log() { printf '[tracing/setup_phoenix %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if venv_ready "$MARKER" "$KEY" "$VENV/bin/phoenix"; then
    log "venv ready ($KEY) at $VENV"
else
    start=$(date +%s)
    log "creating venv at $VENV ($KEY)"
    venv_begin "$VENV" "$MARKER" "$PYTHON"
    "$VENV/bin/python" -m pip install --progress-bar off "arize-phoenix==${VERSION}"
    # Sanity: the CLI the test tier starts must import.
    "$VENV/bin/phoenix" --help >/dev/null
    venv_done "$MARKER" "$KEY"
    log "venv ready in $(( $(date +%s) - start )) s"
fi

echo "AGENTIC_PHOENIX_VENV=$VENV"
