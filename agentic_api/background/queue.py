"""Background responses: enqueue, cancel, and their terminal writes other than the
turn's own commit (a failure outside the model run, a cancel, a lost worker).

A background response is stored at enqueue (status ``queued``, its input items, lineage
and fingerprint as of then) together with a row in ``background_jobs``. A worker
(``background/worker.py``) claims the job, prepares the turn again with the same response id,
creation time and input, marks it ``in_progress`` and runs it; its events are stored as
they come (``background/job_events.py``) and its commit completes the row and deletes the
job in one transaction. Whichever terminal write happens first deletes the job row;
every later one finds no job and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from agentic_api.errors import ApiError, InvalidRequest, NotFound
from agentic_api.idempotency import Claim, stream_outcome
from agentic_api.runtime import Runtime
from agentic_api.storage.database import Database
from agentic_api.storage.idempotency import Outcome
from agentic_api.storage.jobs import JobRepository
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.types import utcnow
from agentic_api.turns.data.caller import Caller
from agentic_api.turns.kinds.tool_loop import check_mcp_hosts
from agentic_api.turns.prepare.turn import prepare_turn
from agentic_api.turns.runner.finish import build_row
from agentic_api.wire.events import TERMINAL_STATUSES, error_event, stamped, terminal_event
from agentic_api.wire.requests import CreateResponseRequest
from agentic_api.wire.response_object import finish_response, response_error


async def enqueue(
    services: Runtime,
    caller: Caller,
    request: CreateResponseRequest,
    *,
    claim: Claim | None = None,
) -> dict[str, Any]:
    """Validates and stores a background request; returns its ``queued`` Response object.

    The turn is prepared now so that a request that cannot run (unknown parent, bad
    tool output, ...) fails here, synchronously, like a foreground one.
    """
    try:
        turn = await prepare_turn(services, caller, request)
        check_mcp_hosts(turn, services.settings)
        queued = {**turn.base, "status": "queued"}
        row, items = build_row(turn, queued, [], [])
        async with services.db.write() as session:
            await ResponseRepository(session).insert(row, items)
            options = request.background_options
            await JobRepository(session).enqueue(
                row.id,
                caller.tenant_id,
                utcnow(),
                window_rank=options.window_rank if options else 0,
                continuation_id=options.continuation_id if options else None,
            )
            if claim is not None:
                # A retry gets what this request answers: the queued object, or (for a
                # stream) the response's event stream, followed from wherever it is.
                outcome = (
                    stream_outcome(row.id)
                    if request.stream
                    else Outcome("json", 200, queued, row.id)
                )
                await claim.complete_in(session, outcome)
    except BaseException:
        if claim is not None:
            await claim.release()
        raise
    services.background.wakeup.set()
    return queued


async def cancel(services: Runtime, tenant_id: str, response_id: str) -> dict[str, Any]:
    """Cancels a queued or running background response and returns it; a finished one
    is returned unchanged (as OpenAI does)."""
    async with services.db.write() as session:
        responses = ResponseRepository(session)
        row = await responses.get(tenant_id, response_id)
        if row is None:
            raise NotFound(f"Response with id '{response_id}' not found.")
        if not row.background:
            raise InvalidRequest(
                "Only responses created with 'background': true can be cancelled.",
                code="response_not_cancellable",
            )
        row = await responses.lock(response_id)
        assert row is not None
        # The job row says whether the response is still unfinished: whoever deletes it
        # writes the terminal state (a worker's commit that lost this race rolls back).
        if row.status in TERMINAL_STATUSES or not await JobRepository(session).remove(row.id):
            return row.body
        body = finish_response(
            row.body, status="cancelled", output=[], usage=None, completed_at=None
        )
        await responses.set_state(row.id, status="cancelled", body=body)
        sequence = await responses.last_sequence(row.id) + 1
        await responses.add_events(row.id, [_event(sequence, terminal_event(body))])
    # Here the run stops at once; a worker in another process notices within its poll.
    services.background.cancel_local(response_id)
    return body


async def fail_job(
    db: Database,
    response_id: str,
    claim_token: str,
    base: dict[str, Any] | None,
    error: ApiError,
    unsaved: Sequence[dict[str, Any]] = (),
    *,
    expired_only: bool = False,
) -> bool:
    """Ends a job as ``failed`` if ``claim_token`` still holds it: stores the events the
    worker had not stored yet, then ``error`` and ``response.failed``. False (and no
    change) when the job was already ended by someone else.

    ``base``: the object to fail (None: the stored one). ``expired_only``: only if the
    claim's lease has expired (recovery of a dead worker).
    """
    async with db.write() as session:
        responses = ResponseRepository(session)
        jobs = JobRepository(session)
        row = await responses.lock(response_id)
        if row is None:
            return False
        ended = (
            await jobs.finish_expired(response_id, claim_token, utcnow())
            if expired_only
            else await jobs.finish(response_id, claim_token)
        )
        if not ended:
            return False
        final = finish_response(
            base or row.body,
            status="failed",
            output=[],
            usage=None,
            completed_at=None,
            error=response_error(error),
        )
        last = await responses.last_sequence(response_id)
        # A batch whose commit outran its acknowledgement is already stored.
        rows: list[tuple[int, dict[str, Any]]] = [
            (e["sequence_number"], e) for e in unsaved if e["sequence_number"] > last
        ]
        last = max([last, *(seq for seq, _ in rows)])
        rows.append((last + 1, error_event(error)))
        rows.append((last + 2, terminal_event(final)))
        await responses.set_state(response_id, status="failed", body=final, error=final["error"])
        await responses.add_events(response_id, [_event(seq, event) for seq, event in rows])
    return True


def _event(sequence: int, event: dict[str, Any]) -> tuple[int, str]:
    return sequence, orjson.dumps(stamped(event, sequence)).decode()
