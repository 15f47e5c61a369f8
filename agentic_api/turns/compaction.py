"""Compaction: the model summarizes a history into one ``compaction`` item.

The summary request is shaped like the continuation it replaces (same instructions,
salt, session headers and history, then one more user message asking for the summary),
so it reuses the history's prefix cache. The item carries the model's summary verbatim in
``encrypted_content`` (the field OpenAI clients replay untouched; ours is not encrypted,
only opaque to clients). When a later request carries the item, ``render`` replays it to
the model as a fixed message holding that summary.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from agentic_api.errors import UpstreamError
from agentic_api.services import Services
from agentic_api.turns.prepare import Caller, prepare_turn
from agentic_api.wire.items import Item
from agentic_api.wire.requests import CreateResponseRequest
from agentic_api.wire.response_object import normalize_usage
from lineage import IdKind, mint_id

SUMMARY_REQUEST = (
    "Summarize the conversation so far for your own later use: the goal, the decisions "
    "made, the facts and results established (including tool results that still matter), "
    "and what remains to be done. Be complete but concise; write it as notes, not prose."
)
SUMMARY_OUTPUT_TOKENS = 2048


async def compact(
    services: Services, caller: Caller, request: CreateResponseRequest
) -> dict[str, Any]:
    turn = await prepare_turn(services.db, caller, request, histories=services.histories)
    ask = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": SUMMARY_REQUEST}],
    }
    body = orjson.loads(turn.body)
    body["input"].append(ask)
    body["stream"] = False
    body["max_output_tokens"] = request.max_output_tokens or SUMMARY_OUTPUT_TOKENS
    answer = await services.upstream.create_response(orjson.dumps(body), turn.headers)
    summary = _output_text(answer)
    if not summary:
        raise UpstreamError("The model returned no summary to compact the history with.")
    kept = [item.as_dict() for item in turn.prompt_items if _is_user_message(item)]
    compaction = {
        "id": mint_id(IdKind.COMPACTION),
        "type": "compaction",
        "encrypted_content": summary,
        "created_by": "agentic-api",
    }
    return {
        "id": mint_id(IdKind.RESPONSE),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*kept, compaction],
        "usage": normalize_usage(answer.get("usage")),
    }


def _is_user_message(item: Item) -> bool:
    return item.type == "message" and item.as_dict().get("role") == "user"


def _output_text(answer: dict[str, Any]) -> str:
    parts: list[str] = []
    for item in answer.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    parts.append(str(part.get("text", "")))
    return "".join(parts).strip()
