"""The tier's child processes: each in a session of its own, logging to a file, stopped
(or SIGKILLed) as a whole group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx


class Child:
    def __init__(
        self, name: str, command: Sequence[str], folder: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.command = list(command)
        self.folder = folder
        self.env = env
        self.log = folder / f"{name}.log"
        self.popen = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as sink:
            return subprocess.Popen(
                self.command,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def restart(self) -> None:
        self.popen = self._start()

    def wait_http(self, url: str, timeout: float) -> None:
        """Until ``url`` answers 200; fails at once if the process exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.name} exited:\n{self.tail()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            time.sleep(0.25)
        raise AssertionError(f"{self.name}: {url} not up in {timeout:.0f} s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL to the whole group: no shutdown hook runs, nothing is drained."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self, grace: float = 20.0) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
