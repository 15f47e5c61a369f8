"""The long-lived objects one server process shares across requests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from agentic_api.cache.keep_warm import KeepWarm
from agentic_api.cache.recent import RecentArtifacts
from agentic_api.cache.residency.subscriber import KvEventSubscriber
from agentic_api.cache.residency.tags import SessionTags
from agentic_api.cache.residency.tracker import ResidencyTracker
from agentic_api.metrics import BACKGROUND_TASKS
from agentic_api.settings import Settings
from agentic_api.storage.database import Database
from agentic_api.storage.verified_histories import VerifiedHistories
from agentic_api.upstream.capabilities import TokenCapabilityMemo
from agentic_api.upstream.client import UpstreamClient


@dataclass
class BackgroundSignals:
    """In-process shortcuts for background jobs; the database stays the source of truth
    (other processes see the same changes by polling it)."""

    # Set when a job is enqueued here, so this process's idle workers claim it at once.
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    # Jobs this process is running, by response id: a cancel made here aborts at once.
    running: dict[str, asyncio.Task[Any]] = field(default_factory=dict)

    def cancel_local(self, response_id: str) -> None:
        task = self.running.get(response_id)
        if task is not None and not task.done():
            task.cancel()


@dataclass
class Runtime:
    """The long-lived handles one server process shares across requests: its database,
    upstream client, salt secret, memos and the tasks it runs on its own. (Named for the
    process it runs in, not to be confused with ``serving/``, the request handlers.)"""

    settings: Settings
    db: Database
    upstream: UpstreamClient
    # Root of every tenant's cache salt; never logged, never sent anywhere.
    secret: bytes
    # What the upstream can tell about tokens (detected at start-up), and the token ids
    # of turns this process just committed.
    tokens: TokenCapabilityMemo
    artifacts: RecentArtifacts
    # Turns running on their own (streams whose client may leave); drained on shutdown.
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    background: BackgroundSignals = field(default_factory=BackgroundSignals)
    histories: VerifiedHistories = field(default_factory=lambda: VerifiedHistories(0))
    # How upstream requests name their session for the replicas' KV events, and what
    # those events said (None when no KV-event endpoint is configured).
    session_tags: SessionTags = field(default_factory=SessionTags)
    residency: ResidencyTracker | None = None
    kv_events: KvEventSubscriber | None = None
    # Paused sessions kept warm (None unless AGENTIC_KEEP_WARM_ENABLED).
    keep_warm: KeepWarm | None = None
    # Per model, the sampling values the upstream applied where a client left them open
    # (its defaults), learned from its answers: a stream then opens as soon as the
    # upstream accepts, its snapshots already carrying them (turns/runner/relay.py).
    sampling_defaults: dict[str, dict[str, float]] = field(default_factory=dict)

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self.tasks.add(task)
        BACKGROUND_TASKS.inc()
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        BACKGROUND_TASKS.dec()
        if not task.cancelled():
            # Failures were already reported to the client and logged by the turn.
            task.exception()

    async def drain(self, grace_seconds: float) -> None:
        if self.tasks:
            _done, pending = await asyncio.wait(set(self.tasks), timeout=grace_seconds)
            for task in pending:
                task.cancel()

    async def close(self) -> None:
        await self.drain(grace_seconds=self.settings.shutdown_grace_seconds)
        if self.kv_events is not None:
            await asyncio.to_thread(self.kv_events.stop)
        await self.tokens.aclose()
        await self.upstream.aclose()
        await self.db.close()
