"""How a turn ends, whichever way it ran (one upstream round or several): the final
object committed, then the terminal event; or the failure stored, then
``response.failed``. Every kind of turn hands its ending (a ``Completion`` or the
failure) to ``end_turn``, the one place a turn ends either way."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from agentic_api.errors import ApiError, Conflict, NotFound
from agentic_api.log import get_logger
from agentic_api.runtime import Services
from agentic_api.storage.errors import nothing_written
from agentic_api.turns.data.token_plan import TokenRecord
from agentic_api.turns.runner.cache_diagnostics import cache_diagnostics
from agentic_api.turns.runner.commit import commit_turn
from agentic_api.turns.runner.commit_readback import (
    settle_failed_commit,
    settle_unrecorded_failure,
)
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.tokens import after_commit, cancel_parent_read, settle_tokens
from agentic_api.wire.events import error_event, stamped, terminal_event
from agentic_api.wire.items import Item
from agentic_api.wire.response_object import finish_response, response_error

log = get_logger("agentic_api.turns.run")


class TurnFailed(Exception):
    """The model run failed after the stream had started; carries the failed object."""

    def __init__(self, response: dict[str, Any], error: ApiError) -> None:
        super().__init__(error.message)
        self.response = response
        self.error = error


@dataclass(frozen=True)
class Completion:
    """A turn whose model part succeeded. ``output`` is what the client sees;
    ``model_output`` what the model saw, which is what is stored and replayed."""

    status: str
    output: list[dict[str, Any]]
    model_output: Sequence[Item]
    usage: dict[str, Any]
    upstream: dict[str, Any]
    incomplete_details: dict[str, Any] | None


# How a kind of turn ended: completed, or failed after it began (the failure is stored).
Ending = Completion | ApiError


async def end_turn(run: TurnInProgress, ending: Ending) -> dict[str, Any]:
    """Ends the turn: commits it and sends its terminal event, returning the final
    object; or stores its failure and raises ``TurnFailed``."""
    if isinstance(ending, ApiError):
        await fail_turn(run, ending)
    return await complete_turn(
        run,
        status=ending.status,
        output=ending.output,
        model_output=ending.model_output,
        usage=ending.usage,
        upstream=ending.upstream,
        incomplete_details=ending.incomplete_details,
    )


async def complete_turn(
    run: TurnInProgress,
    *,
    status: str,
    output: list[dict[str, Any]],
    model_output: Sequence[Item],
    usage: dict[str, Any],
    upstream: dict[str, Any],
    incomplete_details: dict[str, Any] | None,
) -> dict[str, Any]:
    """Commits the turn and sends its terminal event. ``output`` is what the client
    sees; ``model_output`` what the model saw, which is what is stored and replayed."""
    services, turn, relay, emit = run.services, run.turn, run.relay, run.emit
    run.upstream_over()
    relay.adopt_sampling(upstream)
    # The account is settled first: the object the client gets tells what it found.
    tokens = await settle_tokens(services, turn, run.tokens, relay, model_output)
    diagnostics = await cache_diagnostics(services, turn, run.tokens, tokens, relay)
    final = finish_response(
        relay.base,
        status=status,
        output=output,
        usage=usage,
        completed_at=int(time.time()),
        incomplete_details=incomplete_details,
    )
    if diagnostics is not None:
        final["prompt_cache_diagnostics"] = diagnostics
    terminal = relay.stamp(terminal_event(final))
    if turn.request.store:
        stored_events = [*run.events, terminal] if turn.records_events else None
        try:
            await _commit_retrying_once(
                services, run, final, model_output, stored_events, tokens, run.serialized
            )
        except (Conflict, NotFound) as refused:
            # A typed refusal (a conversation that moved on or was deleted, an
            # Idempotency-Key taken over) reaches the client as it is; the transaction
            # rolled back, so nothing was stored.
            # The error takes the terminal event's place (and sequence number).
            log.warning("commit refused", response_id=turn.response_id, code=refused.code)
            emit(stamped(error_event(refused), terminal["sequence_number"]))
            refused.after_model = True
            raise
        except Exception as exc:
            # The database itself failed (our checks ran before the model did). What the
            # client is told is what is stored (turns/runner/commit_readback.py): a commit that
            # landed before the connection went is answered as committed; a refused one
            # is stored as failed, with the Idempotency-Key's outcome, so a retry with the
            # key replays the failure instead of running the model again.
            settled = await settle_failed_commit(services.db, turn, final, exc)
            if not settled.committed:
                assert settled.error is not None
                # The terminal event was never sent: the failure's events take its number.
                relay.release(terminal)
                await fail_turn(run, settled.error, record=settled.record_failure)
    run.model_output = list(model_output)
    emit(terminal)
    after_commit(services, turn, run.tokens, tokens)
    return final


async def _commit_retrying_once(
    services: Services,
    run: TurnInProgress,
    final: dict[str, Any],
    model_output: Sequence[Item],
    events: list[dict[str, Any]] | None,
    tokens: TokenRecord | None,
    serialized: Mapping[int, bytes],
) -> None:
    """Commits the turn; a failure that proves nothing was written (a lock never granted,
    a transaction the database aborted) is retried once."""
    turn = run.turn
    for attempt in (1, 2):
        try:
            await commit_turn(
                services.db,
                turn,
                final,
                model_output,
                events,
                histories=services.histories,
                hooks=run.hooks,
                tokens=tokens,
                serialized=serialized,
            )
            return
        except Exception as exc:
            if attempt == 2 or not nothing_written(exc):
                raise
            log.warning("commit retried", response_id=turn.response_id, reason=type(exc).__name__)


async def fail_turn(run: TurnInProgress, failure: ApiError, *, record: bool = True) -> NoReturn:
    """Stores the failure (input only: never a checkpoint) and ends the stream.
    ``record=False``: the database could store nothing (the failure says so)."""
    services, turn, relay, emit = run.services, run.turn, run.relay, run.emit
    run.upstream_over()
    cancel_parent_read(run.tokens)
    log.warning("turn failed", response_id=turn.response_id, reason=failure.message)
    error = relay.stamp(error_event(failure))
    final = _failed_object(run, failure)
    terminal = relay.stamp(terminal_event(final))
    if turn.request.store and record and not await _recorded(run, final, error, terminal, failure):
        # The failure says what was stored; it was not, so the client is told so instead
        # (same sequence numbers: nothing of the first story was sent).
        failure = await settle_unrecorded_failure(services.db, turn, failure)
        error = stamped(error_event(failure), error["sequence_number"])
        final = _failed_object(run, failure)
        terminal = stamped(terminal_event(final), terminal["sequence_number"])
    emit(error)
    emit(terminal)
    raise TurnFailed(final, failure)


def _failed_object(run: TurnInProgress, failure: ApiError) -> dict[str, Any]:
    return finish_response(
        run.relay.base,
        status="failed",
        output=[],
        usage=None,
        completed_at=None,
        error=response_error(failure),
    )


async def _recorded(
    run: TurnInProgress,
    final: dict[str, Any],
    error: dict[str, Any],
    terminal: dict[str, Any],
    failure: ApiError,
) -> bool:
    """Stores the failed turn (input only: never a checkpoint); whether it was."""
    turn = run.turn
    try:
        await commit_turn(
            run.services.db,
            turn,
            final,
            [],
            [*run.events, error, terminal] if turn.records_events else None,
            histories=run.services.histories,
            hooks=run.hooks,
            failure=failure.body()["error"],
            serialized=run.serialized,
        )
    except ApiError as refused:  # the database's state (busy, lost, full): said once
        log.warning(
            "could not record the failed response", response_id=turn.response_id, code=refused.code
        )
        return False
    except Exception:
        log.exception("could not record the failed response", response_id=turn.response_id)
        return False
    return True
