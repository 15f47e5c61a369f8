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

VENV="${AGENTIC_PHOENIX_VENV:-$HOME/.cache/agentic-api/phoenix-venv}"
VERSION="${AGENTIC_PHOENIX_VERSION:-20.26.1}"
PYTHON="${AGENTIC_PHOENIX_PYTHON:-python3}"

KEY="arize-phoenix==${VERSION} python=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
MARKER="$VENV/.agentic-phoenix-ready"

log() { printf '[tracing/setup_phoenix %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$KEY" && -x "$VENV/bin/phoenix" ]]; then
    log "venv ready ($KEY) at $VENV"
else
    start=$(date +%s)
    log "creating venv at $VENV ($KEY)"
    mkdir -p "$(dirname "$VENV")"
    rm -f "$MARKER"
    [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --progress-bar off "arize-phoenix==${VERSION}"
    # Sanity: the CLI the test tier starts must import.
    "$VENV/bin/phoenix" --help >/dev/null
    echo "$KEY" >"$MARKER"
    log "venv ready in $(( $(date +%s) - start )) s"
fi

echo "AGENTIC_PHOENIX_VENV=$VENV"
