"""How long a replacement `serve` worker takes to start, and whether uvicorn's supervisor
kills replacements while they boot (issue 23).

Starts the simulator and `agentic-api serve --workers 2` (SQLite in a temporary folder),
optionally with BUSY processes spinning on the CPUs, then SIGKILLs one worker at a time
and times, from each kill: the replacement's process appearing, and its
"Started server process" line (its interpreter started, the CLI module and the app
imported: what a worker does before it can answer its first request). A replacement the
supervisor kills itself (a "Child process [pid] died" for a pid this script did not kill)
is counted. Prints one JSON object.

    .venv/bin/python scripts/bench/worker_restart.py --kills 5 --busy 4
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STARTED = re.compile(r"Started server process \[(\d+)\]")
DIED = re.compile(r"Child process \[(\d+)\] died")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(entry.name))
    return found


def workers(supervisor: int) -> set[int]:
    # uvicorn's spawn context also starts a resource tracker; workers run the server.
    found = set()
    for pid in children(supervisor):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if b"resource_tracker" not in command:
            found.add(pid)
    return found


def wait_http(port: int, deadline_s: float = 180) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"GET /health HTTP/1.0\r\n\r\n")
                if b"200" in conn.recv(64):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"nothing answered on port {port}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--busy", type=int, default=0, help="CPU-spinning processes to add")
    parser.add_argument("--wait", type=float, default=60.0, help="longest wait per replacement")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="worker-restart-"))
    python = sys.executable
    sim_port, port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIC_")}
    env.update(
        AGENTIC_DATA_DIR=str(work / "data"),
        AGENTIC_UPSTREAM_BASE_URL=f"http://127.0.0.1:{sim_port}",
        AGENTIC_LOG_LEVEL="info",
        AGENTIC_LOG_FORMAT="console",
    )
    spawned: list[subprocess.Popen[bytes]] = []
    log_path = work / "serve.log"
    try:
        spawned.append(
            subprocess.Popen(
                [
                    python,
                    "-m",
                    "tests.upstream_sim",
                    "--port",
                    str(sim_port),
                    "--model",
                    "sim-model",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_http(sim_port)
        with log_path.open("wb") as log:
            serve = subprocess.Popen(
                [python, "-m", "agentic_api.cli", "serve", "--workers", "2", "--port", str(port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        spawned.append(serve)
        wait_http(port)
        deadline = time.monotonic() + 120
        while len(STARTED.findall(log_path.read_text())) < 2:
            if time.monotonic() > deadline:
                raise SystemExit("the two workers never started")
            time.sleep(0.2)
        for _ in range(args.busy):
            spawned.append(subprocess.Popen([python, "-c", "while True: pass"]))
        time.sleep(5)  # the load average catches up a little
        load_before = os.getloadavg()
        killed: set[int] = set()
        rounds = []
        for _ in range(args.kills):
            current = workers(serve.pid)
            victim = min(current)
            started_before = len(STARTED.findall(log_path.read_text()))
            at = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            killed.add(victim)
            appeared = started = None
            while time.monotonic() - at < args.wait:
                now = time.monotonic() - at
                if appeared is None and workers(serve.pid) - current:
                    appeared = now
                if len(STARTED.findall(log_path.read_text())) > started_before:
                    started = now
                    break
                time.sleep(0.05)
            rounds.append({"replacement_appeared_s": appeared, "replacement_started_s": started})
            time.sleep(2)
        text = log_path.read_text()
        killed_by_supervisor = [int(pid) for pid in DIED.findall(text) if int(pid) not in killed]
        started_times = [r["replacement_started_s"] for r in rounds if r["replacement_started_s"]]
        print(
            json.dumps(
                {
                    "kills": args.kills,
                    "busy_processes": args.busy,
                    "cpus": os.cpu_count(),
                    "machine": platform.node(),
                    "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()],
                    "rounds": [
                        {k: None if v is None else round(v, 2) for k, v in r.items()}
                        for r in rounds
                    ],
                    "replacement_started_max_s": round(max(started_times), 2)
                    if started_times
                    else None,
                    "replacements_never_started": sum(
                        1 for r in rounds if not r["replacement_started_s"]
                    ),
                    "replacements_killed_by_supervisor": len(killed_by_supervisor),
                },
                indent=2,
            )
        )
    finally:
        for process in reversed(spawned):
            process.terminate()
        for process in spawned:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
