#!/usr/bin/env bash
# Installs Claude Code (@anthropic-ai/claude-code, pinned) once into a cache folder for the
# end-to-end test; prints the path of its binary. The npm package brings its native
# binary as a platform package (@anthropic-ai/claude-code-linux-x64 and the like).
set -euo pipefail
VERSION=2.1.328
PREFIX="${AGENTIC_CLAUDE_CODE_PREFIX:-$HOME/.cache/agentic-api/claude-code}"
BIN="$PREFIX/node_modules/.bin/claude"
mkdir -p "$PREFIX"
# One install at a time (parallel test workers, other checkouts share the cache).
exec 9>"$PREFIX/.install.lock"
flock 9
if [ ! -x "$BIN" ] || ! "$BIN" --version 2>/dev/null | grep -q "$VERSION"; then
  npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@$VERSION" >&2
fi
echo "$BIN"
