"""The long-lived objects one server process shares across requests."""

from __future__ import annotations

from dataclasses import dataclass

from agentic_api.settings import Settings
from agentic_api.storage.database import Database
from agentic_api.upstream.client import UpstreamClient


@dataclass
class Services:
    settings: Settings
    db: Database
    upstream: UpstreamClient
    # Root of every tenant's cache salt; never logged, never sent anywhere.
    secret: bytes

    async def close(self) -> None:
        await self.upstream.aclose()
        await self.db.close()
