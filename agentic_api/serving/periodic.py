"""A loop that runs ``tick`` every few seconds on the event loop until stopped — the
keep-warm loop, the replicas' probe — with one aiohttp session for the replicas' own
pages (``/metrics``, ``/health``), made on first use and closed at stop. A tick that
raises is logged and the loop goes on."""

from __future__ import annotations

import asyncio

import aiohttp

from agentic_api.log import get_logger

log = get_logger("agentic_api.serving.periodic")


class Periodic:
    def __init__(self, interval_seconds: float, *, first_at_once: bool = False) -> None:
        self.interval_seconds = interval_seconds
        self.first_at_once = first_at_once
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def tick(self) -> None:
        raise NotImplementedError

    async def _run(self) -> None:
        if not self.first_at_once:
            await asyncio.sleep(self.interval_seconds)
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("periodic tick failed", loop=type(self).__name__)
            await asyncio.sleep(self.interval_seconds)
