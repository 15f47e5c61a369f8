"""Run an ASGI app with uvicorn on a loopback port in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from agentic_api.http.protocol import CoalescingHttpToolsProtocol
from tests.support import strict_wiring


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThreadedServer:
    """``strict``: every reply the suite gets from it passes ``tests/support/strict.py``
    (for our servers; the MCP test server and raw protocol apps opt out)."""

    def __init__(self, app: Any, port: int | None = None, *, strict: bool = True) -> None:
        self.port = port or free_port()
        self.strict = strict
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=5,
            # As `agentic-api serve` runs it.
            http=CoalescingHttpToolsProtocol,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("server thread died during start-up")
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start in time")
            time.sleep(0.02)
        if self.strict:
            strict_wiring.watch(self.url)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        if self.strict:
            strict_wiring.unwatch(self.url)
