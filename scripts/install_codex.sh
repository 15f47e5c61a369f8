#!/usr/bin/env bash
# Installs the Codex CLI (@openai/codex, pinned) once into a cache folder for the
# end-to-end test; prints the path of its binary.
set -euo pipefail
VERSION=0.169.0
PREFIX="${AGENTIC_CODEX_PREFIX:-$HOME/.cache/agentic-api/codex}"
BIN="$PREFIX/node_modules/.bin/codex"
mkdir -p "$PREFIX"
# One install at a time (parallel test workers, other checkouts share the cache).
exec 9>"$PREFIX/.install.lock"
flock 9
if [ ! -x "$BIN" ] || ! "$BIN" --version 2>/dev/null | grep -q "$VERSION"; then
  npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "@openai/codex@$VERSION" >&2
fi
echo "$BIN"
