#!/usr/bin/env bash
# What each server costs while nothing happens: CPU per second and resident memory of
# its whole process tree, read from /proc over IDLE_S seconds with no request in flight
# (after one streamed turn each, so that what a first request loads is counted).
#
#   scripts/bench/idle.sh [IDLE_S]
#
# Env as for streaming.sh (DB, WORKERS, PEER, BASE_PORT, BEFORE: see servers.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

IDLE_S=${1:-60}
DB=${DB:-sqlite}
WORKERS=${WORKERS:-auto}
PEER=${PEER-$HOME/.cache/agentic-api/peer-venv}
BASE_PORT=${BASE_PORT:-18740}
source scripts/bench/servers.sh
start_servers agentic-bench-idle agentic_bench_idle --default-reply-tokens 16

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/python - "$IDLE_S" "${targets[@]}" --api-key "ours=$KEY" <<'EOF'
import sys
import time

import httpx

from agentic_bench.process_cpu import tree_cpu_seconds, read_stat, PROC

idle_s = float(sys.argv[1])
args = sys.argv[2:]
pairs = {flag: {} for flag in ("--target", "--pid", "--api-key")}
for flag, value in zip(args[::2], args[1::2]):
    name, _, rest = value.partition("=")
    pairs[flag][name] = rest
urls, pids, keys = pairs["--target"], pairs["--pid"], pairs["--api-key"]


def tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                stat = read_stat(int(entry.name))
            except Exception:
                continue
            children.setdefault(stat.ppid, []).append(stat.pid)
    out, pending = [], [pid]
    while pending:
        current = pending.pop()
        out.append(current)
        pending += children.get(current, [])
    return out


def rss_mib(pid: int) -> float:
    total = 0
    for member in tree(pid):
        for line in (PROC / str(member) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


for name, url in urls.items():
    headers = {"authorization": f"Bearer {keys[name]}"} if name in keys else {}
    model = httpx.get(f"{url}/v1/models", headers=headers).json()["data"][0]["id"]
    body = {"model": model, "input": "hello", "stream": True}
    with httpx.stream("POST", f"{url}/v1/responses", json=body, headers=headers) as r:
        assert r.status_code == 200, r.status_code
        r.read()
time.sleep(5)
start = {name: tree_cpu_seconds(int(pid)) for name, pid in pids.items()}
began = time.monotonic()
time.sleep(idle_s)
wall = time.monotonic() - began
for name, pid in pids.items():
    used = tree_cpu_seconds(int(pid)) - start[name]
    print(
        f"{name}: {used * 1000 / wall:.2f} ms CPU per s idle over {wall:.0f} s, "
        f"RSS {rss_mib(int(pid)):.1f} MiB ({len(tree(int(pid)))} processes)"
    )
EOF
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
