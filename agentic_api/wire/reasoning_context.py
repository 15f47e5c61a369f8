"""``reasoning.context``: which earlier reasoning items go back to the model.

``all_turns`` (also ``auto`` and absent, what this server always did) replays every stored
reasoning item. ``current_turn`` sends only the reasoning of the turn in progress: items
after the last user message (a tool loop's own rounds, a client's function-call outputs
answering this turn), none from before it. Stored items, listings and the prefix digest
are untouched: only the upstream request leaves them out.

What the model then sees is up to its chat template: vLLM hands reasoning items back as
the assistant's reasoning, and a template renders at most what was sent (Qwen3's and
DeepSeek-R1's drop reasoning before the last user message themselves; templates without
reasoning, SmolLM2's, render none). So ``current_turn`` is honoured for every model, and
``all_turns`` as far as the model's template renders earlier reasoning. Leaving
earlier reasoning out changes the prompt at the first item left out: a continuation
under ``current_turn`` reuses the cache up to there, not past it.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentic_api.wire.items import Item

CURRENT_TURN = "current_turn"


def sent_items(items: Sequence[Item], mode: str) -> list[Item]:
    """``items`` as the model gets them under ``mode`` (an effective mode, never auto)."""
    if mode != CURRENT_TURN:
        return list(items)
    last_user = _last_user_message(items)
    return [
        item for index, item in enumerate(items) if item.type != "reasoning" or index > last_user
    ]


def _last_user_message(items: Sequence[Item]) -> int:
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if item.type == "message" and item.as_dict().get("role") == "user":
            return index
    return -1
