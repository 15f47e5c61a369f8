"""The upstream request that compacts a history: the history itself, then one user
message asking the model for a summary.

It is shaped like the continuation it replaces (same instructions, tools, salt, session
headers and the history's stored bytes in order), so it extends the prefix the model
server already holds for the history and pays only for the question and the summary.

A client asks for it either inline, with a ``compaction_trigger`` item as the last
input item of ``POST /v1/responses`` (what Codex sends), or through
``POST /v1/responses/compact``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentic_api.errors import InvalidRequest
from agentic_api.turns.prepare.render import render_body
from agentic_api.wire.items import Item, to_item
from agentic_api.wire.summary import COMPACTION_TRIGGER

__all__ = ["COMPACTION_TRIGGER", "requests_compaction", "summary_body", "summary_text"]

SUMMARY_REQUEST = (
    "Summarize the conversation so far for your own later use: the goal, the decisions "
    "made, the facts and results established (including tool results that still matter), "
    "and what remains to be done. Be complete but concise; write it as notes, not prose."
)
# The summary's output budget when the client sets none.
SUMMARY_OUTPUT_TOKENS = 2048


def requests_compaction(new_input: Sequence[Item]) -> bool:
    """Whether the input ends with a ``compaction_trigger``; refuses one anywhere else
    (OpenAI's rule: it must be the final input item, so there is at most one)."""
    last = len(new_input) - 1
    for index, item in enumerate(new_input):
        if item.type == COMPACTION_TRIGGER and index != last:
            raise InvalidRequest(
                "A 'compaction_trigger' item must be the last input item.",
                param=f"input[{index}]",
                code="invalid_value",
            )
    return last >= 0 and new_input[last].type == COMPACTION_TRIGGER


def summary_ask() -> Item:
    return to_item(
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": SUMMARY_REQUEST}],
        }
    )


def summary_body(
    fields: dict[str, Any], prompt: Sequence[Item], max_output_tokens: int | None
) -> bytes:
    """The summary request for ``prompt`` (the trigger, if any, is never sent upstream).

    ``tool_choice: "none"``: the tools stay in the prompt (so its prefix is the
    history's), but the answer must be the summary, not a call."""
    asked = {
        **fields,
        "tool_choice": "none",
        "max_output_tokens": max_output_tokens or SUMMARY_OUTPUT_TOKENS,
    }
    return render_body(asked, [*prompt, summary_ask()])


def summary_text(answer: dict[str, Any]) -> str:
    """The model's summary: the text of its answer's messages (reasoning left out)."""
    parts: list[str] = []
    for item in answer.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    parts.append(str(part.get("text", "")))
    return "".join(parts).strip()
