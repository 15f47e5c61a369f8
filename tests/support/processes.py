"""Our server (or worker) as a real subprocess, to be killed with SIGKILL.

``serve`` may be several processes (``AGENTIC_HTTP_WORKERS``, ``auto`` by default: uvicorn's
supervisor and its workers), so each server starts in a session of its own and ``kill``
takes the whole group, as a crash of the server (a container or host going down) would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support import strict_wiring
from tests.support.servers import free_port

CLI = [sys.executable, "-m", "agentic_api.cli"]
# A process starts in about a second; on a machine shared with other test runs (xdist
# workers, other people's suites) importing the app has taken over 30 s. Only a bound on
# failure, never a measurement.
START_TIMEOUT_SECONDS = 90.0
SECRET = "test-server-secret-0123456789abcdef"


def process_env(db_url: str, upstream: str, data_dir: Path, **settings: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIC_")}
    env.update(
        {
            "AGENTIC_DATABASE_URL": db_url,
            "AGENTIC_UPSTREAM_BASE_URL": upstream,
            "AGENTIC_DATA_DIR": str(data_dir),
            "AGENTIC_SERVER_SECRET": SECRET,
            "AGENTIC_AUTO_MIGRATE": "false",
            "AGENTIC_LOG_FORMAT": "console",
            "AGENTIC_LOG_LEVEL": "warning",
            "AGENTIC_SHUTDOWN_GRACE_SECONDS": "2",
        }
    )
    env.update({f"AGENTIC_{k.upper()}": str(v) for k, v in settings.items()})
    # Several workers keep their metric files in a temporary folder that a killed server
    # cannot remove: keep it with the test's own files.
    env["TMPDIR"] = str(data_dir / "tmp")
    return env


class Process:
    """``agentic-api serve`` (``url`` set) or ``agentic-api worker``."""

    def __init__(self, env: dict[str, str], *args: str, http: bool = True) -> None:
        self.port = free_port() if http else None
        command = [*CLI, *args]
        if self.port is not None:
            command += ["--port", str(self.port)]
        self.log = Path(env["AGENTIC_DATA_DIR"]) / f"process-{time.monotonic_ns()}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if "TMPDIR" in env:
            Path(env["TMPDIR"]).mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as sink:
            self.popen = subprocess.Popen(
                command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )

    @classmethod
    def serve(cls, env: dict[str, str]) -> Process:
        process = cls(env, "serve")
        process.wait_up()
        return process

    @classmethod
    def worker(cls, env: dict[str, str], workers: int = 1) -> Process:
        process = cls(
            {**env, "AGENTIC_LOG_LEVEL": "info"}, "worker", "--workers", str(workers), http=False
        )
        process.wait_for_output("workers started")
        return process

    def wait_for_output(self, text: str, timeout: float = START_TIMEOUT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.popen.poll() is not None:
                raise AssertionError(f"process exited:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} from the process:\n{self.output()}")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_up(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise AssertionError(f"process exited during start-up:\n{self.output()}")
            try:
                httpx.get(f"{self.url}/health", timeout=1)
                strict_wiring.watch(self.url)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"process did not come up:\n{self.output()}")

    def kill(self) -> None:
        """SIGKILL to every process of the server: no shutdown hook, no drain, no rollback
        but the database's own. Returns once none of them runs any more."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _group_running(self.popen.pid):
            assert time.monotonic() < deadline, "the server's workers outlived SIGKILL"
            time.sleep(0.02)
        if self.port is not None:
            strict_wiring.unwatch(self.url)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.port is not None:
            strict_wiring.unwatch(self.url)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _group_running(group: int) -> bool:
    """Whether a process of that group still runs (zombies, dead but not yet reaped by
    whoever adopted them, do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        # After the command name (in parentheses, may hold spaces): state, ppid, pgrp.
        state, _ppid, pgrp = text.rpartition(")")[2].split()[:3]
        if int(pgrp) == group and state not in ("Z", "X"):
            return True
    return False


def end_process(popen: subprocess.Popen[bytes]) -> None:
    """Stops a helper process the tests started (a receiver, a Prometheus): SIGTERM, then
    SIGKILL if it has not gone within 30 s."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(timeout=10)
