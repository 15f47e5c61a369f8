#!/usr/bin/env bash
# Runs the server (SQLite under ~/.local/share/agentic-api by default), installing it first
# into .venv if needed. Arguments go to `agentic-api serve` (e.g. --upstream URL --port N).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/agentic-api ]; then
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e .
fi
exec .venv/bin/agentic-api serve "$@"
