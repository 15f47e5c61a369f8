"""``serve``'s uvicorn server: its idle loop wakes once a second, an exit signal wakes it
at once, and responses still carry uvicorn's Date header."""

from __future__ import annotations

import asyncio
import signal
import socket

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from agentic_api.http import quiet_server
from agentic_api.http.quiet_server import QuietServer
from tests.support.servers import free_port


async def hello(_request: object) -> PlainTextResponse:
    return PlainTextResponse("hi")


async def test_an_exit_signal_stops_the_server_without_waiting_for_its_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A tick far longer than the test may wait: only the wake-up can end it in time.
    monkeypatch.setattr(quiet_server, "_TICK_SECONDS", 3600.0)
    port = free_port()
    app = Starlette(routes=[Route("/", hello)])
    server = _Observed(uvicorn.Config(app, port=port, log_level="warning", lifespan="off"))
    # Signals are the caller's here (uvicorn installs handlers only for its own run()).
    monkeypatch.setattr(server, "capture_signals", _no_signals)
    serving = asyncio.create_task(server.serve())
    await asyncio.wait_for(server.listening.wait(), timeout=10)
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}/")
    assert response.text == "hi" and "date" in response.headers
    server.handle_exit(signal.SIGTERM, None)
    await asyncio.wait_for(serving, timeout=10)


class _Observed(QuietServer):
    """Says when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()


class _NoSignals:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def _no_signals() -> _NoSignals:
    return _NoSignals()
