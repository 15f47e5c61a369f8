"""How a turn ends, whichever way it ran (one upstream round or several): the final
object committed, then the terminal event; or the failure stored, then
``response.failed``. Every kind of turn hands its ending (a ``Completion`` or the
failure) to ``end_turn``, the one place a turn ends either way. The commit itself — the
turn's single write — is ``commit_turn``, at the end of this module."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

import orjson

from agentic_api import tracing
from agentic_api.errors import ApiError, Conflict, NotFound
from agentic_api.log import get_logger
from agentic_api.metrics import COMMIT_DURATION
from agentic_api.runtime import Runtime
from agentic_api.storage.conversations import NewConversationItem
from agentic_api.storage.database import Database
from agentic_api.storage.errors import nothing_written
from agentic_api.storage.models import Response, TokenArtifactRow
from agentic_api.storage.responses import NewItem, ResponseRepository
from agentic_api.storage.token_artifacts import TokenArtifactRepository
from agentic_api.storage.turn_rows import EventJson
from agentic_api.storage.verified_histories import VerifiedHistories
from agentic_api.turns.data.commit_steps import NO_HOOKS, CommitHooks
from agentic_api.turns.data.prepared import CONTINUABLE, PreparedTurn
from agentic_api.turns.data.token_plan import TokenRecord
from agentic_api.turns.prepare.conversation import append_turn
from agentic_api.turns.prepare.history import salt_identity
from agentic_api.turns.runner.commit_readback import (
    settle_failed_commit,
    settle_unrecorded_failure,
)
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.tokens import (
    after_commit,
    cache_diagnostics,
    cancel_parent_read,
    settle_tokens,
)
from agentic_api.wire.events import error_event, stamped, terminal_event
from agentic_api.wire.items import Item
from agentic_api.wire.response_object import finish_response, response_error
from lineage import extend_digest, prefix_digest

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
        stored_events = [*run.events, as_stored(terminal)] if turn.records_events else None
        try:
            await _commit_retrying_once(services, run, final, model_output, stored_events, tokens)
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
    services: Runtime,
    run: TurnInProgress,
    final: dict[str, Any],
    model_output: Sequence[Item],
    events: list[tuple[int, bytes]] | None,
    tokens: TokenRecord | None,
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
            [*run.events, as_stored(error), as_stored(terminal)] if turn.records_events else None,
            histories=run.services.histories,
            hooks=run.hooks,
            failure=failure.body()["error"],
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


def as_stored(event: dict[str, Any]) -> tuple[int, bytes]:
    """An event not published yet (the terminal one, committed before it is sent), as the
    turn's stored events hold it."""
    return (event["sequence_number"], orjson.dumps(event))


# The turn's single write: response row, items, stored stream and (in a conversation)
# the conversation's new items and head, in one short transaction.


def _visible_digest(turn: PreparedTurn, visible: Sequence[Item]) -> str:
    """The prefix digest over everything the model saw in this turn and produced."""
    parent = turn.parent
    if (
        turn.history_digest is not None
        and parent is not None
        and parent.model == turn.request.model
        and parent.salt_epoch == turn.caller.salt_epoch
    ):
        # Same model and salt: the parent's verified digest is this chain's prefix.
        tail = visible[len(turn.history) :]
        return extend_digest(turn.history_digest, (item.data for item in tail))
    identity = salt_identity(turn.caller.tenant_id, turn.caller.salt_epoch)
    return prefix_digest(turn.request.model, identity, (item.data for item in visible))


def build_row(
    turn: PreparedTurn, final: dict[str, Any], output: Sequence[Item], visible: Sequence[Item]
) -> tuple[Response, list[NewItem]]:
    """``visible``: the model-visible history through ``output`` (empty unless the turn is
    continuable)."""
    status = final["status"]
    continuable = status in CONTINUABLE
    usage = final.get("usage") or {}
    now = datetime.now(UTC)
    completed = final.get("completed_at")
    row = Response(
        id=turn.response_id,
        tenant_id=turn.caller.tenant_id,
        conversation_id=turn.conversation_id,
        previous_response_id=turn.request.previous_response_id,
        session_id=turn.lineage.session_id,
        depth=turn.lineage.depth,
        status=status,
        model=turn.request.model,
        created_at=datetime.fromtimestamp(turn.created_at, UTC),
        completed_at=datetime.fromtimestamp(completed, UTC) if completed else None,
        updated_at=now,
        store=True,
        background=turn.request.background,
        body=final,
        request=turn.request.model_dump(mode="json", exclude_none=True),
        error=final.get("error"),
        input_tokens=usage.get("input_tokens"),
        cached_tokens=(usage.get("input_tokens_details") or {}).get("cached_tokens"),
        output_tokens=usage.get("output_tokens"),
        fingerprint=turn.fingerprint.to_dict(),
        fingerprint_digest=turn.fingerprint.digest,
        fingerprint_changes=[
            {"component": c.component, "description": c.description}
            for c in turn.fingerprint_changes
        ],
        salt_epoch=turn.caller.salt_epoch,
        prefix_digest=_visible_digest(turn, visible) if continuable else None,
        history_item_count=len(visible),
        input_item_count=len(turn.new_input),
        output_item_count=len(output) if continuable else 0,
        # Only a turn that joins its conversation's items gets a place in it; a failed
        # one is kept (for inspection) but attached to nothing the model will see.
        conversation_position=(
            turn.conversation.next_position if turn.conversation and continuable else None
        ),
    )
    items = [NewItem(i.id, "input", i.type, i.data.decode()) for i in turn.new_input]
    if continuable:
        items += [NewItem(i.id, "output", i.type, i.data.decode()) for i in output]
    return row, items


async def commit_turn(
    db: Database,
    turn: PreparedTurn,
    final: dict[str, Any],
    output: Sequence[Item],
    events: Sequence[tuple[int, bytes]] | None,
    *,
    histories: VerifiedHistories,
    hooks: CommitHooks = NO_HOOKS,
    tokens: TokenRecord | None = None,
    failure: dict[str, Any] | None = None,
) -> None:
    """Stores the turn; once committed, its history is kept in ``histories``.
    ``hooks``: what whoever runs the turn attached to its commit (turns/data/commit_steps.py).
    ``tokens``: its token artifact and reuse account (turns/runner/tokens.py), stored with it.
    ``events``: ``(sequence_number, json)``, the JSON each was (or will be) published with.
    ``failure``: for a failed turn, our error as the client got it (its own code, e.g.
    ``commit_failed``), kept in the row's ``error`` so a keyed retry answers the same
    error; the Response object's ``error`` carries only a code OpenAI's schema allows."""
    with COMMIT_DURATION.time():
        visible = [*turn.prompt_items, *output] if final["status"] in CONTINUABLE else []
        row, items = build_row(turn, final, output, visible)
        if failure is not None:
            row.error = failure
        artifact = None
        if tokens is not None:
            row.token_account = tokens.account.to_dict()
            row.lost_by_cause = {cause.value: n for cause, n in tokens.account.lost.items()}
            row.lost_tokens = sum(tokens.account.lost.values())
            artifact = tokens.artifact
        if events and hooks.event_log is not None:
            events = await hooks.event_log.unsaved(events)
        stored_events = list(events or ())
        touches_only_itself = (
            row.conversation_position is None and turn.reservation is None and not hooks.steps
        )
        with tracing.span("commit", attributes={"agentic.commit.items": len(items)}):
            if touches_only_itself:
                await db.turns.insert(row, items, stored_events, artifact)
            else:
                await _commit_with_the_rest(db, turn, hooks, row, items, stored_events, artifact)
        if row.prefix_digest is not None:
            histories.keep(
                row.id, digest=row.prefix_digest, session_id=row.session_id, items=visible
            )


async def _commit_with_the_rest(
    db: Database,
    turn: PreparedTurn,
    hooks: CommitHooks,
    row: Response,
    items: Sequence[NewItem],
    events: Sequence[EventJson],
    artifact: TokenArtifactRow | None,
) -> None:
    """The commit of a turn that also joins a conversation, completes a reserved
    (background) row or carries commit steps: one transaction through the repositories."""
    async with db.write() as session:
        if turn.conversation is not None and row.conversation_position is not None:
            # First, so a turn that lost the race raises before writing anything.
            await append_turn(
                session,
                turn.caller.tenant_id,
                turn.conversation,
                row.id,
                [NewConversationItem(i.item_id, i.type, i.data) for i in items],
            )
        repo = ResponseRepository(session)
        if turn.reservation is None:
            await repo.insert(row, items)
        else:
            # Enqueued earlier with its input items: complete that row, add the output.
            stored = len(turn.reservation.new_input)
            await repo.complete_reserved(row, items[stored:], first_position=stored)
        await repo.add_events(row.id, events)
        if artifact is not None:
            await TokenArtifactRepository(session).insert(artifact)
        for step in hooks.steps:
            await step(session, row)
