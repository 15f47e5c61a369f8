"""``POST /v1/responses/compact``: the history compacted by the model, answered as the
compacted window (the history's user messages, then the ``compaction`` item) and stored
nowhere. The summary request is the one inline compaction sends
(``turns/kinds/compaction.py``)."""

from __future__ import annotations

import time
from typing import Any

from agentic_api.errors import UpstreamError
from agentic_api.runtime import Runtime
from agentic_api.turns.data.caller import Caller
from agentic_api.turns.kinds.compaction import compaction_item
from agentic_api.turns.prepare.summary_request import COMPACTION_TRIGGER, summary_text
from agentic_api.turns.prepare.turn import prepare_turn
from agentic_api.wire.items import Item
from agentic_api.wire.requests import CreateResponseRequest
from agentic_api.wire.response_object import normalize_usage
from lineage import IdKind, mint_id


async def compact(
    services: Runtime, caller: Caller, request: CreateResponseRequest
) -> dict[str, Any]:
    """``POST /v1/responses/compact``: the compacted window (the history's user messages,
    then the compaction item), computed by the same summary request; nothing is stored."""
    trigger = {"type": COMPACTION_TRIGGER}
    given = request.input if isinstance(request.input, list) else _as_items(request.input)
    asked = request.model_copy(update={"input": [*given, trigger], "store": False})
    turn = await prepare_turn(services, caller, asked)
    answer = await services.upstream.create_response(turn.body, turn.headers)
    summary = summary_text(answer)
    if not summary:
        raise UpstreamError("The model returned no summary to compact the history with.")
    kept = [_kept_message(item) for item in turn.prompt_items if _is_user_message(item)]
    return {
        "id": mint_id(IdKind.RESPONSE),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*kept, compaction_item(mint_id(IdKind.COMPACTION), summary)],
        "usage": normalize_usage(answer.get("usage")),
        # Echoed as OpenAI's CompactedResponse does (null when none was given).
        "safety_identifier": request.safety_identifier,
    }


def _as_items(text: str) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]


def _is_user_message(item: Item) -> bool:
    return item.type == "message" and item.as_dict().get("role") == "user"


def _kept_message(item: Item) -> dict[str, Any]:
    """A kept user message as a full message item: its id (minted for input that had
    none), ``status``, and ``content`` as a list of ``input_text`` parts."""
    value = item.as_dict()
    content = value.get("content")
    if isinstance(content, str):
        content = [{"type": "input_text", "text": content}]
    return {
        "id": item.id or mint_id(IdKind.MESSAGE),
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": content,
    }
