"""``serve``'s uvicorn server: its idle loop sleeps until an exit signal wakes it, and
responses still carry a current Date header, which the requests keep current themselves
(``http/protocol.py:keep_date_current``) now that no tick does."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from agentic_api.http import quiet_server
from agentic_api.http.protocol import CoalescingHttpToolsProtocol
from agentic_api.http.quiet_server import QuietServer
from tests.support.servers import free_port


async def hello(_request: object) -> PlainTextResponse:
    return PlainTextResponse("hi")


@asynccontextmanager
async def serving(monkeypatch: pytest.MonkeyPatch, **options: Any) -> AsyncIterator[str]:
    """A QuietServer with a tick far longer than any test waits, listening; its URL.
    Stopped on leaving by an exit signal, which must end it in time by itself."""
    monkeypatch.setattr(quiet_server, "_TICK_SECONDS", 3600.0)
    port = free_port()
    app = Starlette(routes=[Route("/", hello)])
    server = _Observed(
        uvicorn.Config(app, port=port, log_level="warning", lifespan="off", **options)
    )
    # Signals are the caller's here (uvicorn installs handlers only for its own run()).
    monkeypatch.setattr(server, "capture_signals", _no_signals)
    running = asyncio.create_task(server.serve())
    await asyncio.wait_for(server.listening.wait(), timeout=10)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.handle_exit(signal.SIGTERM, None)
        await asyncio.wait_for(running, timeout=10)


async def test_an_exit_signal_stops_the_server_without_waiting_for_its_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving(monkeypatch) as url, httpx.AsyncClient() as client:
        response = await client.get(url)
    assert response.text == "hi" and "date" in response.headers


async def test_the_date_header_follows_the_clock_with_no_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[float] = []
    async with (
        serving(monkeypatch, http=CoalescingHttpToolsProtocol) as url,
        httpx.AsyncClient() as client,
    ):
        for _ in range(2):
            response = await client.get(url)
            asked_at = time.time()
            stamped = parsedate_to_datetime(response.headers["date"]).timestamp()
            # The header's second is the request's (to the second it was made in).
            assert asked_at - 2 < stamped <= asked_at
            assert len(response.headers.get_list("date")) == 1
            seen.append(stamped)
            await asyncio.sleep(1.2)
    assert seen[1] > seen[0]


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
