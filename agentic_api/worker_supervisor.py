"""The supervisor of ``serve``'s HTTP workers: uvicorn's, with its health check made
non-blocking, so a dead worker is replaced as soon as it exits.

uvicorn's supervisor checks its workers one after the other, each by a ping it then waits
for, up to the health-check timeout (``WORKER_HEALTHCHECK_SECONDS``, long so that a
replacement still booting on a loaded machine is not killed). A worker killed while its
ping was in flight never answers, and the pipe shows no end-of-file (the supervisor holds
both ends), so the kill was noticed only when that wait ran out: a 30 s gap with one
worker fewer, and every other worker's check held up behind it.

Here death and silence are told apart. Every pass (twice a second) first asks whether
each worker's process has exited (``waitpid``, no waiting), and replaces those that have;
then it reads whatever answers have arrived, and sends a worker its next ping only once
it answered the last. A worker that has not answered a ping for the whole timeout is
hung, and killed and replaced as before; one that is only busy or booting has that long.
"""

from __future__ import annotations

import logging
import pickle
import time
from enum import Enum
from socket import socket
from weakref import WeakKeyDictionary

from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.supervisors.multiprocess import Multiprocess, Process

logger = logging.getLogger("uvicorn.error")


class Health(Enum):
    ALIVE = "alive"
    EXITED = "exited"
    UNRESPONSIVE = "unresponsive"


class WorkerSupervisor(Multiprocess):
    """Keeps ``config.workers`` workers running, replacing any that exits or hangs."""

    def __init__(self, config: Config, sockets: list[socket]) -> None:
        super().__init__(config, sockets)
        # When each worker's unanswered ping was sent. Weak keys: uvicorn's own handlers
        # (SIGTTIN, SIGHUP) add and swap workers, and a retired worker's entry must go
        # with it.
        self._pings_sent: WeakKeyDictionary[Process, float] = WeakKeyDictionary()

    def health(self, process: Process, now: float) -> Health:
        """One non-blocking look at a worker; sends its next ping when the last was
        answered."""
        if not process.process.is_alive():
            return Health.EXITED
        sent_at = self._pings_sent.get(process)
        try:
            if sent_at is not None:
                if not process.parent_conn.poll():
                    if now - sent_at > self.config.timeout_worker_healthcheck:
                        return Health.UNRESPONSIVE
                    return Health.ALIVE
                process.parent_conn.recv()
            process.parent_conn.send(b"ping")
        except (OSError, EOFError, pickle.UnpicklingError):
            # The pipe broke: the worker is gone or going; its exit is seen next pass.
            return Health.UNRESPONSIVE
        self._pings_sent[process] = now
        return Health.ALIVE

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        now = time.monotonic()
        for index, process in enumerate(self.processes):
            health = self.health(process, now)
            if health is Health.ALIVE:
                continue
            self._pings_sent.pop(process, None)
            if health is Health.UNRESPONSIVE:
                logger.warning(
                    f"Child process [{process.pid}] did not answer its health check within "
                    f"{self.config.timeout_worker_healthcheck} s; killing it"
                )
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                # It failed before serving: the app, TLS or socket is broken and every
                # replacement would fail the same way (as uvicorn's own supervisor does).
                logger.error(
                    f"Child process [{process.pid}] failed to start, stopping the parent process."
                )
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            logger.info(f"Child process [{process.pid}] died")
            replacement = Process(self.config, self.sockets)
            replacement.start()
            self.processes[index] = replacement
