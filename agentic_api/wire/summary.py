"""How a ``compaction`` item is shown to the model."""

from __future__ import annotations

from typing import Any

from lineage import canonical_json

SUMMARY_HEADER = "Summary of the earlier conversation:\n"


def summary_message(item: dict[str, Any]) -> bytes:
    """A fixed, deterministic message holding the item's summary, so a history that carries
    the item keeps a stable prefix turn after turn (model servers reject the item itself)."""
    text = SUMMARY_HEADER + str(item.get("encrypted_content", ""))
    return canonical_json(
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
