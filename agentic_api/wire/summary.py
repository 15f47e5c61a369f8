"""How compaction items are shown to the model: a ``compaction`` item as a fixed message
holding its summary, a ``compaction_trigger`` not at all (model servers reject both
item types: vLLM answers 400 "Unsupported input item type")."""

from __future__ import annotations

from typing import Any

from lineage import canonical_json

SUMMARY_HEADER = "Summary of the earlier conversation:\n"
# The input item that asks for a compaction (OpenAI's inline form, which Codex uses).
COMPACTION_TRIGGER = "compaction_trigger"


def summary_message(item: dict[str, Any]) -> bytes:
    """A fixed, deterministic message holding the item's summary, so a history that carries
    the item keeps a stable prefix turn after turn (model servers reject the item itself)."""
    text = SUMMARY_HEADER + str(item.get("encrypted_content", ""))
    return canonical_json(
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
