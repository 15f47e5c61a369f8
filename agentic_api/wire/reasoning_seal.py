"""``include: ["reasoning.encrypted_content"]`` as this server honours it.

OpenAI encrypts a reasoning item's content so a client that stores nothing on the server
(``store: false``, Codex) can send the item back and the model sees its reasoning again.
vLLM returns no ``encrypted_content``; the reasoning of an open-weight model is the
item's readable ``content``. Asked for it, each reasoning item gets ``encrypted_content``:
that content, sealed in a form only this server reads back. An item sent back with it is
replayed to the model with the sealed content when it comes without ``content`` of its
own (Codex drops ``reasoning_text`` content when it replays an item and keeps only
``encrypted_content``).

The seal is an encoding, not a cipher: the same text is in ``content``, which the client
already has, so there is nothing to hide from it; and a client that forges a seal could
as well have sent that text as ``content``. What it tells is whose blob it is: another
provider's (OpenAI's own) opaque ``encrypted_content`` is never read as reasoning.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

import orjson

INCLUDE_VALUE = "reasoning.encrypted_content"
SEAL_PREFIX = "agentic-reasoning.v1."


def wants_sealed_reasoning(include: Sequence[str] | None) -> bool:
    return INCLUDE_VALUE in (include or ())


def seal(content: list[Any]) -> str:
    encoded = base64.urlsafe_b64encode(orjson.dumps(content)).decode("ascii")
    return SEAL_PREFIX + encoded


def unseal(value: Any) -> list[dict[str, Any]] | None:
    """The content a seal of ours holds; None for anything else (another provider's
    blob, a damaged seal, a seal of something that is not a list of text parts)."""
    if not isinstance(value, str) or not value.startswith(SEAL_PREFIX):
        return None
    try:
        content = orjson.loads(base64.urlsafe_b64decode(value[len(SEAL_PREFIX) :]))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(content, list) or not all(
        isinstance(part, dict) and isinstance(part.get("text"), str) for part in content
    ):
        return None
    return content


def sealed_reasoning(item: dict[str, Any]) -> dict[str, Any]:
    """A reasoning item with its readable content sealed into ``encrypted_content``; an
    item with no readable content is left as it is (a client's item may carry another
    provider's blob, which must not be replaced)."""
    content = item.get("content")
    if item.get("type") != "reasoning" or not isinstance(content, list) or not content:
        return item
    return {**item, "encrypted_content": seal(content)}


def reasoning_content(item: dict[str, Any]) -> list[Any] | None:
    """What a reasoning item sent back gives the model to read: its own ``content``, else
    the content its seal holds (None: neither)."""
    content = item.get("content")
    if isinstance(content, list) and content:
        return content
    return unseal(item.get("encrypted_content"))
