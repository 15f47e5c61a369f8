"""The named replicas' probe (``AGENTIC_UPSTREAM_REPLICAS``): every
``placement_probe_seconds``, each replica's ``/health`` (a failure ejects it for a
back-off and drops its residency: it may be restarting with an empty cache) and its
``/metrics`` (its load, read as keep-warm reads it: ``upstream/replica_metrics.py``), kept
in the placement book for the rounds to read. No round waits for a probe."""

from __future__ import annotations

import asyncio

from agentic_api.cache.placement import Load
from agentic_api.cache.placement_book import PlacementBook
from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.runtime import Runtime
from agentic_api.serving.periodic import Periodic
from agentic_api.upstream.replica_metrics import read_load

log = get_logger("agentic_api.serving.replica_probe")


class ReplicaProbe(Periodic):
    def __init__(self, services: Runtime, book: PlacementBook) -> None:
        super().__init__(services.settings.placement_probe_seconds, first_at_once=True)
        self.services = services
        self.book = book

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
        load = await read_load(self.session, f"{client.base_url}/metrics")
        self.book.set_load(
            name,
            None if load is None else Load(load.waiting, load.kv_usage, load.kv_capacity_tokens),
        )
