"""Sealed reasoning (``include: reasoning.encrypted_content``): what a seal of ours gives
back, and that nothing else is ever read as reasoning."""

from __future__ import annotations

import base64

import pytest

from agentic_api.wire.reasoning_seal import (
    SEAL_PREFIX,
    reasoning_content,
    seal,
    sealed_reasoning,
    unseal,
)

CONTENT = [{"type": "reasoning_text", "text": "Think: 2 + 2 = 4. \u00e9\u4e2d\U0001f600"}]


def test_a_seal_gives_its_content_back() -> None:
    assert unseal(seal(CONTENT)) == CONTENT


@pytest.mark.parametrize(
    "value",
    [
        None,
        42,
        "gAAAAB-openai-blob",
        SEAL_PREFIX + "!!!not base64!!!",
        SEAL_PREFIX + base64.urlsafe_b64encode(b"not json").decode(),
        SEAL_PREFIX + base64.urlsafe_b64encode(b'{"a": 1}').decode(),
        SEAL_PREFIX + base64.urlsafe_b64encode(b'[{"type": "x"}]').decode(),
        SEAL_PREFIX + base64.urlsafe_b64encode(b"[1, 2]").decode(),
    ],
)
def test_anything_else_is_not_reasoning(value: object) -> None:
    assert unseal(value) is None


def test_an_item_keeps_its_own_content_first() -> None:
    own = [{"type": "reasoning_text", "text": "mine"}]
    item = {"type": "reasoning", "content": own, "encrypted_content": seal(CONTENT)}
    assert reasoning_content(item) == own
    assert reasoning_content({**item, "content": None}) == CONTENT
    assert reasoning_content({**item, "content": [], "encrypted_content": "blob"}) is None


def test_only_readable_reasoning_is_sealed() -> None:
    readable = {"type": "reasoning", "id": "rs_1", "summary": [], "content": CONTENT}
    assert unseal(sealed_reasoning(readable)["encrypted_content"]) == CONTENT
    foreign = {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "blob"}
    assert sealed_reasoning(foreign) == foreign
    message = {"type": "message", "role": "assistant", "content": CONTENT}
    assert sealed_reasoning(message) == message
