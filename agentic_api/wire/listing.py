"""How stored items are shown in listings (the stored bytes themselves never change)."""

from __future__ import annotations

from typing import Any


def present_item(item: dict[str, Any]) -> dict[str, Any]:
    """OpenAI lists messages with content parts, even when given as a plain string."""
    if item.get("type") == "message" and isinstance(item.get("content"), str):
        part_type = "output_text" if item.get("role") == "assistant" else "input_text"
        part: dict[str, Any] = {"type": part_type, "text": item["content"]}
        if part_type == "output_text":
            part["annotations"] = []
        return {**item, "content": [part]}
    return item
