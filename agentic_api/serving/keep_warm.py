"""The keep-warm loop (``AGENTIC_KEEP_WARM_ENABLED``): every tick, asks the policy
(``cache/keep_warm.py``) which paused sessions lost their prefix, checks the replica's
pressure where its ``/metrics`` is configured, and re-warms each through the prewarm path
(``turns/prewarm.py``): the paused turn's continuation with ``input: []``, prepared as the
agent's next turn will be (same history, salt, session fields, headers), so the router
sends it where that turn will go. Nothing it does is stored."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agentic_api.cache.keep_warm import Due, KeepWarm, Pause, Rewarm
from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.runtime import Runtime
from agentic_api.serving.periodic import Periodic
from agentic_api.serving.tenants import active_tenant
from agentic_api.turns.data.caller import Caller
from agentic_api.turns.prepare.turn import prepare_turn
from agentic_api.turns.prewarm import run_prewarm
from agentic_api.upstream.replica_metrics import read_load
from agentic_api.wire.create_fields import PromptCacheOptions
from agentic_api.wire.requests import CreateResponseRequest

log = get_logger("agentic_api.serving.keep_warm")


def continuation_prewarm(paused: CreateResponseRequest, response_id: str) -> CreateResponseRequest:
    """The prewarm of what continues ``paused`` (its response ``response_id``): the same
    request fields (instructions, tools, sampling, pass-through), the same place (the
    conversation, else the response), no new input."""
    conversation = paused.conversation
    return paused.model_copy(
        update={
            "input": [],
            "previous_response_id": None if conversation is not None else response_id,
            "prompt_cache_options": PromptCacheOptions(prewarm=True),
            "stream": False,
            "background": False,
            "metadata": None,
        }
    )


class KeepWarmLoop(Periodic):
    def __init__(self, services: Runtime, policy: KeepWarm) -> None:
        super().__init__(services.settings.keep_warm_interval_seconds)
        self.services = services
        self.policy = policy

    async def tick(self) -> None:
        for due in list(self.policy.due(self._tokens_of)):
            checked = await self._pressure(due)
            if checked is None:
                continue
            if not self.policy.is_paused(due.pause):
                continue  # the agent came back while the replica was asked
            rewarm = self.policy.started(due, None, pressure_checked=checked)
            task = self.services.spawn(self._rewarm(due.pause, rewarm))
            self.policy.attach(rewarm, task)

    async def _pressure(self, due: Due) -> bool | None:
        """Whether pressure was checked (True) or cannot be (False: no metrics URL for
        the replica); None when the replica is under pressure, or holds more paused
        sessions than its KV cache fits and this one is not among them (skipped)."""
        settings = self.services.settings
        url = self._metrics_url(due.replica or "")
        if url is None:
            return False
        load = await read_load(self.session, url)
        if (
            load is None
            or load.waiting > settings.keep_warm_max_waiting
            or load.kv_usage > settings.keep_warm_max_kv_usage
        ):
            self.policy.skip(due.pause, "pressure")
            return None
        capacity = load.kv_capacity_tokens
        if capacity is not None and not self.policy.fits(
            due, capacity, settings.keep_warm_capacity_share, self._tokens_of
        ):
            self.policy.skip(due.pause, "capacity")
            return None
        return True

    def _metrics_url(self, replica: str) -> str | None:
        """The replica's ``/metrics``: as configured for keep-warm, else, for a named
        replica the gateway places on (``AGENTIC_UPSTREAM_REPLICAS``), its own server's."""
        url = self.services.settings.keep_warm_replica_metrics.get(replica)
        if url is None and replica in self.services.replicas:
            url = f"{self.services.replicas[replica].base_url}/metrics"
        return url

    def _tokens_of(self, pause: Pause) -> Sequence[int] | None:
        if pause.warm is not None:
            return pause.tokens  # an agent waiting inside a running tree
        kept = self.services.artifacts.get(pause.tenant_id, pause.response_id)
        return None if kept is None else kept.prompt + kept.output

    async def _rewarm(self, pause: Pause, rewarm: Rewarm) -> None:
        try:
            if pause.warm is not None:
                # An agent waiting inside a running tree: its own turn sends its prefix
                # (the tree runs for a tenant that was active when it started).
                usage: dict[str, Any] | None = await pause.warm()
            else:
                usage = await self._prewarm(pause, rewarm)
        except asyncio.CancelledError:
            self.policy.ended(rewarm, "cancelled", "the agent came back first")
            raise
        except ApiError as exc:
            self.policy.ended(rewarm, "failed", exc.message)
            log.warning("keep-warm re-warm failed", session_id=pause.session_id, error=exc.code)
            return
        if usage is not None:
            self.policy.finished(rewarm, usage)

    async def _prewarm(self, pause: Pause, rewarm: Rewarm) -> dict[str, Any] | None:
        """The paused turn's continuation, prewarmed; its usage (None: not sent)."""
        request = continuation_prewarm(pause.request, pause.response_id)
        # The tenant as it is now, not as it was at the pause: a disabled tenant gets no
        # more upstream work, and a rotated salt warms what the agent's next turn (under
        # the new salt) will read. A purged response fails in prepare_turn (not found).
        tenant = await active_tenant(self.services, pause.tenant_id)
        if tenant is None:
            self.policy.forget(pause.key)
            self.policy.ended(rewarm, "cancelled", "the tenant is disabled or gone")
            return None
        caller = Caller(tenant.id, tenant.salt_epoch, tenant.cache_salt)
        turn = await prepare_turn(self.services, caller, request)
        done = await run_prewarm(self.services, turn)
        usage: dict[str, Any] = done.response["usage"]
        return usage
