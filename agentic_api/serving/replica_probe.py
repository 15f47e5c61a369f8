"""The named replicas' probe (``AGENTIC_UPSTREAM_REPLICAS``): every
``placement_probe_seconds``, each replica's ``/health`` (a failure ejects it for a
back-off and drops its residency: it may be restarting with an empty cache) and its
``/metrics`` (its load, read as keep-warm reads it: ``upstream/replica_metrics.py``), kept
in the placement book for the rounds to read. No round waits for a probe."""

from __future__ import annotations

import asyncio

import aiohttp

from agentic_api.cache.placement import Load
from agentic_api.cache.placement_book import PlacementBook
from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.runtime import Services
from agentic_api.upstream.replica_metrics import read_load

log = get_logger("agentic_api.serving.replica_probe")


class ReplicaProbe:
    def __init__(self, services: Services, book: PlacementBook) -> None:
        self.services = services
        self.book = book
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _run(self) -> None:
        interval = self.services.settings.placement_probe_seconds
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("replica probe failed")
            await asyncio.sleep(interval)

    async def tick(self) -> None:
        await asyncio.gather(*(self._probe(name) for name in self.services.replicas))

    async def _probe(self, name: str) -> None:
        client = self.services.replicas[name]
        try:
            await client.health()
        except ApiError:
            if name not in self.book.ejected():
                seconds = self.book.eject(name, "health")
                log.warning("replica ejected", replica=name, cause="health", seconds=seconds)
            return
        self.book.healthy(name)
        if self._session is None:
            self._session = aiohttp.ClientSession()
        load = await read_load(self._session, f"{client.base_url}/metrics")
        self.book.set_load(name, None if load is None else Load(load.waiting, load.kv_usage))
