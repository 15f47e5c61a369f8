#!/usr/bin/env bash
# Runs the whole test suite: lint, types, the layer contract, then pytest on SQLite and
# PostgreSQL, in parallel (pytest-xdist). Needs PostgreSQL on 127.0.0.1:5432 (user
# postgres, trust auth) — set AGENTIC_TEST_PG to another admin DSN if yours differs.
# Extra arguments go to pytest (e.g. --backend sqlite, -m "not slow", tests/api).
# AGENTIC_TEST_WORKERS: xdist workers (default auto: one per CPU; 0 runs in one process).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[dev]'

# A merge's leftover conflict markers (one reached CONTRIBUTING.md once, past every check).
if git grep -nE '^(<<<<<<<|>>>>>>>)( |$)' 2>/dev/null; then
  echo "merge conflict markers in the files above" >&2
  exit 1
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy agentic_api agentic_bench lineage migrations tests
.venv/bin/lint-imports --no-cache
# Many tests wait (leases, disconnects, processes starting), so workers overlap well even
# on 2 cores; each worker runs its own simulator, servers and databases.
.venv/bin/python -m pytest -n "${AGENTIC_TEST_WORKERS:-auto}" "$@"

# The console render benchmark, short (1,000 conversations, a 100-turn chain, 3 runs per
# page; about 2 minutes at load average 34 on the shared 2-core machine): prints each page's time and SQL statements, no assertion on
# time. AGENTIC_CONSOLE_BENCH=1 runs it locally; CI always does.
if [[ "${AGENTIC_CONSOLE_BENCH:-0}" == "1" || "${CI:-}" == "true" ]]; then
  .venv/bin/python scripts/bench/console_pages.py --backend sqlite --short
fi

# The fuzz tier (tests/fuzz): schemathesis over /openapi.json against a real server on
# SQLite and PostgreSQL, over 5,000 generated requests each; prints each database's
# count and time. AGENTIC_FUZZ=0 leaves it out of a local run, never out of CI.
if [[ "${AGENTIC_FUZZ:-1}" == "1" || "${CI:-}" == "true" ]]; then
  .venv/bin/python -m pytest -m fuzz tests/fuzz -q -s
fi

# The real-vLLM tier (CPU vLLM: the tiny model, ~1-2 min once scripts/real_vllm/setup.sh has
# its cache; SmolLM2-135M-Instruct for token-level truth, ~4 min on a loaded 2-core machine
# once setup_smollm2.sh has its cache, ~2 min more the first time). Reuses a running vLLM
# given by AGENTIC_REAL_VLLM_URL. Single-process: every worker would start a vLLM of its own.
if [[ "${AGENTIC_REAL_VLLM:-0}" == "1" || "${CI:-}" == "true" ]]; then
  .venv/bin/python -m pytest -m real_vllm tests/real_vllm -rs
fi

# The real-tracing tier (tests/real_tracing: Arize Phoenix as a real OTLP receiver, our
# server exporting to it; spans read back through Phoenix's API). About 35 s once
# scripts/tracing/setup_phoenix.sh has its venv, which it installs the first time (install
# and tier from nothing: 232 s at load average 22-26 on the 2-core machine). Single-process: every worker would start a Phoenix of its own.
if [[ "${AGENTIC_REAL_TRACING:-0}" == "1" || "${CI:-}" == "true" ]]; then
  .venv/bin/python -m pytest -m real_tracing tests/real_tracing -q
fi

# The scale-out tier (tests/scale_out: three gateway replicas over one PostgreSQL of its
# own behind HAProxy, two CPU vLLMs behind vllm-router, a gateway SIGKILL and a PostgreSQL
# restart mid-load): about 10 minutes on this project's 2-core machine, too long for CI,
# so only on request. scripts/scale_out/run.sh runs it and writes docs/benchmarks/scale_out.
if [[ "${AGENTIC_SCALE_OUT:-0}" == "1" ]]; then
  .venv/bin/python -m pytest -m scale_out tests/scale_out -q
fi
