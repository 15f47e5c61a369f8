"""Many stored turns written straight to a database, for the console's statement-count
tests and its render benchmark (scripts/bench/console_pages.py): a tenant with N
conversations of a few turns each, and one long ``previous_response_id`` chain, every turn
with a token account that records lost tokens by cause. Real turns through the server
would take minutes for 10,000 conversations; the rows are the shape a turn commits."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import insert

from agentic_api.storage.database import Database
from agentic_api.storage.models import Conversation, Response, ResponseItem
from lineage import IdKind, canonical_json, mint_id
from tests.support.fingerprints import bare_fingerprint

_FINGERPRINT = bare_fingerprint("sim-model")
_BATCH = 1000


@dataclass(frozen=True)
class SeededChain:
    session_id: str
    response_ids: list[str]


def _account(turn: int, parent_id: str | None) -> dict[str, Any] | None:
    if parent_id is None:
        return {"status": "cold_start", "measured_cached": 0, "lost": {}, "changes": []}
    lost = {"partial_block": 7} if turn % 3 else {"not_resident": 64, "partial_block": 7}
    return {
        "status": "exact",
        "token_exact": True,
        "parent_id": parent_id,
        "block_size": 16,
        "parent_tokens": 100 + turn * 20,
        "prompt_tokens": 120 + turn * 20,
        "reusable_tokens": 100 + turn * 20,
        "expected_cached": 96 + turn * 20 - 7,
        "measured_cached": 32 + turn * 20 if turn % 3 == 0 else 96 + turn * 20 - 7,
        "ideal_cached": 96 + turn * 20,
        "cause": "not_resident" if turn % 3 == 0 else "partial_block",
        "lost": lost,
        "extra_cached": 0,
        "divergence": None,
        "changes": [],
        "reason": None,
    }


def _turn(
    tenant_id: str,
    session_id: str,
    *,
    at: datetime,
    turn: int,
    parent_id: str | None,
    conversation_id: str | None,
) -> dict[str, Any]:
    account = _account(turn, parent_id)
    return {
        "id": mint_id(IdKind.RESPONSE),
        "tenant_id": tenant_id,
        "conversation_id": conversation_id,
        "previous_response_id": parent_id,
        "session_id": session_id,
        "depth": turn,
        "status": "completed",
        "model": "sim-model",
        "created_at": at,
        "completed_at": at + timedelta(milliseconds=40 + turn % 50),
        "updated_at": at,
        "store": True,
        "background": False,
        "body": {},
        "request": {},
        "error": None,
        "input_tokens": 120 + turn * 20,
        "cached_tokens": (account or {}).get("measured_cached", 0),
        "output_tokens": 20,
        "fingerprint": _FINGERPRINT.to_dict(),
        "fingerprint_digest": _FINGERPRINT.digest,
        "fingerprint_changes": [],
        "salt_epoch": 1,
        "prefix_digest": "0" * 64,
        "history_item_count": 2 * (turn + 1),
        "input_item_count": 1,
        "output_item_count": 1,
        "conversation_position": 2 * turn if conversation_id else None,
        "token_account": account,
        # What the commit writes beside the account (turns/runner/finish.py).
        "lost_by_cause": None if account is None else account["lost"],
        "lost_tokens": None if account is None else sum(account["lost"].values()),
    }


def _chain(
    tenant_id: str,
    session_id: str,
    count: int,
    first_at: datetime,
    apart: timedelta,
    conversation_id: str | None,
) -> list[dict[str, Any]]:
    """``count`` turns of one session, ``apart`` from each other, each one's account made
    against the turn before it."""
    rows: list[dict[str, Any]] = []
    for turn in range(count):
        row = _turn(
            tenant_id,
            session_id,
            at=first_at + turn * apart,
            turn=turn,
            parent_id=rows[-1]["id"] if rows else None,
            conversation_id=conversation_id,
        )
        if conversation_id is not None:
            # Conversation turns are roots; the account still names the previous turn.
            row["previous_response_id"] = None
        rows.append(row)
    return rows


def _items(tenant_id: str, response_id: str, text: str) -> list[dict[str, Any]]:
    rows = []
    for position, (role, kind) in enumerate((("input", "user"), ("output", "assistant"))):
        item_id = mint_id(IdKind.MESSAGE)
        data = {
            "type": "message",
            "id": item_id,
            "role": kind,
            "content": [{"type": "input_text" if role == "input" else "output_text", "text": text}],
        }
        rows.append(
            {
                "response_id": response_id,
                "position": position,
                "tenant_id": tenant_id,
                "item_id": item_id,
                "role": role,
                "type": "message",
                "data": canonical_json(data).decode(),
            }
        )
    return rows


def _write(db_url: str, *tables: tuple[Any, list[dict[str, Any]]]) -> None:
    """Inserts each table's rows, in batches, in the order given (a table before the
    tables whose rows reference it)."""

    async def run() -> None:
        db = Database.from_url(db_url, pool_size=1)
        try:
            for table, rows in tables:
                for start in range(0, len(rows), _BATCH):
                    async with db.write() as session:
                        await session.execute(insert(table), rows[start : start + _BATCH])
        finally:
            await db.close()

    asyncio.run(run())


def seed_conversations(
    db_url: str, tenant_id: str, count: int, *, turns_each: int = 2, now: datetime | None = None
) -> list[str]:
    """``count`` conversations of ``turns_each`` turns, one second apart; their ids."""
    start = (now or datetime.now(UTC)) - timedelta(seconds=count + turns_each)
    conversations, responses = [], []
    for index in range(count):
        conversation_id = mint_id(IdKind.CONVERSATION)
        at = start + timedelta(seconds=index)
        turns = _chain(
            tenant_id, conversation_id, turns_each, at, timedelta(milliseconds=1), conversation_id
        )
        responses.extend(turns)
        conversations.append(
            {
                "id": conversation_id,
                "tenant_id": tenant_id,
                "created_at": at,
                "updated_at": at,
                "metadata_": {"agent": f"agent-{index % 7}"},
                "next_position": 2 * turns_each,
                "version": turns_each,
                "head_response_id": turns[-1]["id"] if turns else None,
            }
        )
    _write(db_url, (Conversation, conversations), (Response, responses))
    return [str(row["id"]) for row in conversations]


def seed_chain(
    db_url: str, tenant_id: str, turns: int, *, now: datetime | None = None
) -> SeededChain:
    """One ``previous_response_id`` chain of ``turns`` turns, each with two items."""
    session_id = f"bench-chain-{mint_id(IdKind.ITEM)}"
    start = (now or datetime.now(UTC)) - timedelta(seconds=turns)
    responses = _chain(tenant_id, session_id, turns, start, timedelta(seconds=1), None)
    items = [
        item
        for turn, row in enumerate(responses)
        for item in _items(tenant_id, row["id"], f"turn {turn} of the long session")
    ]
    _write(db_url, (Response, responses), (ResponseItem, items))
    return SeededChain(session_id, [str(row["id"]) for row in responses])
