"""``POST /v1/responses``: a create, from its parsed request to what the route renders.

The sequence: an ``Idempotency-Key`` is claimed first (a key already answered replays
its outcome, and nothing runs); a background request is stored queued (with the key's
outcome, in the same transaction); anything else is prepared (a refusal releases the
key) and run, streamed or to its end, with the key held while it runs and its outcome
recorded by the turn's commit. A prewarm (``prompt_cache_options.prewarm``) stores
nothing and is safe to repeat, so its Idempotency-Key is neither claimed nor recorded:
a retry warms the cache again and answers afresh.
"""

from __future__ import annotations

from typing import Any

from agentic_api import idempotency
from agentic_api.background.follow import follow
from agentic_api.background.queue import enqueue
from agentic_api.errors import ApiError
from agentic_api.idempotency import Claim, requires_store
from agentic_api.runtime import Runtime
from agentic_api.serving.results import Final, Prewarmed, Queued, Replayed, Streaming, replayed
from agentic_api.storage.idempotency import KeyRef, Outcome
from agentic_api.turns.data.caller import Caller
from agentic_api.turns.data.commit_steps import NO_HOOKS, CommitHooks
from agentic_api.turns.prepare.turn import prepare_turn
from agentic_api.turns.prewarm import run_prewarm
from agentic_api.turns.run import TurnFailed, open_stream, run_turn
from agentic_api.wire.multi_agent import check_concurrency
from agentic_api.wire.requests import CreateResponseRequest

Created = Replayed | Queued | Streaming | Final | Prewarmed


async def create_response(
    services: Runtime,
    caller: Caller,
    request: CreateResponseRequest,
    raw: dict[str, Any],
    *,
    key: str | None,
) -> Created:
    """``raw``: the request as parsed JSON (an Idempotency-Key's request hash);
    ``key``: the request's Idempotency-Key, checked."""
    check_concurrency(request.multi_agent, services.settings.multi_agent_max_concurrent)
    if request.prewarms:
        return await run_prewarm(services, await prepare_turn(services, caller, request))
    claim: Claim | None = None
    if key is not None:
        if not request.store:
            raise requires_store()
        claimed = await idempotency.claim(
            services.db,
            KeyRef(caller.tenant_id, idempotency.RESPONSES, key),
            idempotency.request_hash(raw),
            ttl_seconds=services.settings.idempotency_ttl_seconds,
            lease_seconds=services.settings.lease_seconds,
        )
        if isinstance(claimed, Outcome):
            return replayed(services.db, claimed)
        claim = claimed
    if request.background:
        queued = await enqueue(services, caller, request, claim=claim)
        return Queued(queued, follow(services.db, queued["id"], None) if request.stream else None)
    try:
        turn = await prepare_turn(services, caller, request)
    except BaseException:
        if claim is not None:
            await claim.release()
        raise
    # The key's outcome is recorded by the turn's commit, in its transaction.
    hooks = (
        NO_HOOKS
        if claim is None
        else CommitHooks(steps=(claim.records("stream" if request.stream else "json"),))
    )
    if request.stream:
        return Streaming(
            await open_stream(
                services, turn, guard=None if claim is None else claim.hold, hooks=hooks
            )
        )
    work = run_turn(services, turn, hooks=hooks)
    try:
        return Final(await (work if claim is None else claim.hold(work)))
    except TurnFailed as failed:
        raise ApiError(
            f"Response '{turn.response_id}' failed: {failed.error.message}",
            status_code=failed.error.status_code,
            error_type=failed.error.error_type,
            code=failed.error.code,
        ) from failed
