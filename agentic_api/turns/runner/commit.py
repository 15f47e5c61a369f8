"""The turn's single write: response row, items, stored stream and (in a conversation)
the conversation's new items and head, in one short transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from agentic_api import tracing
from agentic_api.metrics import COMMIT_DURATION
from agentic_api.storage.conversations import NewConversationItem
from agentic_api.storage.database import Database
from agentic_api.storage.models import Response, TokenArtifactRow
from agentic_api.storage.responses import NewItem, ResponseRepository
from agentic_api.storage.token_artifacts import TokenArtifactRepository
from agentic_api.storage.verified_histories import VerifiedHistories
from agentic_api.turns.data.commit_steps import NO_HOOKS, CommitHooks
from agentic_api.turns.data.prepared import CONTINUABLE, PreparedTurn
from agentic_api.turns.data.token_plan import TokenRecord
from agentic_api.turns.prepare.conversation import append_turn
from agentic_api.turns.prepare.history import salt_identity
from agentic_api.wire.items import Item
from lineage import extend_digest, prefix_digest


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
    events: Sequence[dict[str, Any]] | None,
    *,
    histories: VerifiedHistories,
    hooks: CommitHooks = NO_HOOKS,
    tokens: TokenRecord | None = None,
    failure: dict[str, Any] | None = None,
    serialized: Mapping[int, bytes] | None = None,
) -> None:
    """Stores the turn; once committed, its history is kept in ``histories``.
    ``hooks``: what whoever runs the turn attached to its commit (turns/data/commit_steps.py).
    ``tokens``: its token artifact and reuse account (turns/runner/tokens.py), stored with it.
    ``serialized``: the JSON the turn's events were published with, by ``id``.
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
        # The JSON each event was published with (turns/runner/in_progress.py), by id; an event
        # never published yet (the terminal one, committed before it is sent) is serialized here.
        known = serialized or {}
        stored_events = [
            (e["sequence_number"], (known.get(id(e)) or orjson.dumps(e)).decode())
            for e in events or ()
        ]
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
    events: Sequence[tuple[int, str]],
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
