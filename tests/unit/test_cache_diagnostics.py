"""The reuse account as OpenAI's ``prompt_cache_diagnostics``: every variant validates
against the openai SDK's union, and each cause maps to the reason the table of
docs/cache_truth.md names."""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from openai.types.responses.response import PromptCacheDiagnostics
from pydantic import TypeAdapter

from agentic_api.cache.accounting import Cause, Continuation, account, cold_start, unknown
from agentic_api.cache.diagnostics import NOT_FOUND, UNAVAILABLE, diagnostics

BLOCK = 4
SDK = TypeAdapter[Any](PromptCacheDiagnostics)
PARENT_PROMPT = array("I", range(1, 13))
PARENT_OUTPUT = array("I", [100, 101, 102, 103])


def continuing(prompt: list[int], measured: int, **known: Any) -> dict[str, Any]:
    made = account(
        Continuation(parent_id="resp_parent", **known),
        PARENT_PROMPT,
        PARENT_OUTPUT,
        array("I", prompt),
        measured,
        BLOCK,
    )
    answer = diagnostics(made)
    SDK.validate_python(answer, strict=True)
    return answer


EXTENDED = [*PARENT_PROMPT, *PARENT_OUTPUT, 7, 8, 9]


def test_a_served_exact_continuation_is_a_hit() -> None:
    assert continuing(EXTENDED, 12) == {"type": "cache_hit"}


def test_nothing_served_is_never_a_hit() -> None:
    evicted = continuing(EXTENDED, 0)
    assert evicted == {
        "type": "cache_miss",
        "reason": "prompt_cache_key_changed",
        "cache_missed_tokens": len(EXTENDED),
        "comparison_reusable_tokens": 16,
    }
    # Fewer served than expected: the rest was evicted.
    assert continuing(EXTENDED, 8)["reason"] == "prompt_cache_key_changed"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        (("model",), "model_changed"),
        (("salt_epoch",), "prompt_cache_key_changed"),
        (("tools",), "tools_changed"),
        (("text",), "text_format_changed"),
        (("reasoning",), "reasoning_effort_changed"),
        (("reasoning_context",), "input_changed"),
        (("instructions",), "input_changed"),
        (("instructions", "tools"), "input_changed"),
    ],
)
def test_fingerprint_changes_name_their_reason(changes: tuple[str, ...], reason: str) -> None:
    # The change renders before the history: the prompt differs from its fifth token.
    prompt = [1, 2, 3, 4, 99, *EXTENDED[5:]]
    answer = continuing(prompt, 4, changes=changes)
    assert answer["type"] == "cache_miss" and answer["reason"] == reason


def test_history_and_template_divergences_are_input_changed() -> None:
    prompt = [*PARENT_PROMPT, 100, 55, 56, 57, 58]
    assert continuing(prompt, 12, history_edited=True)["reason"] == "input_changed"
    template = continuing(prompt, 12)
    assert template["reason"] == "input_changed"
    assert template["comparison_reusable_tokens"] == 13
    assert template["cache_missed_tokens"] == len(prompt) - 12


def test_accounts_without_ids_are_unavailable() -> None:
    for made in (
        unknown("no ids", parent_id="resp_parent"),
        cold_start(10, 0, BLOCK),
        account(
            Continuation(parent_id="p"), PARENT_PROMPT, PARENT_OUTPUT, PARENT_PROMPT, None, BLOCK
        ),
    ):
        assert diagnostics(made) == UNAVAILABLE
    SDK.validate_python(UNAVAILABLE, strict=True)
    SDK.validate_python(NOT_FOUND, strict=True)


def test_a_prefix_shorter_than_a_block_is_a_miss() -> None:
    short = account(
        Continuation(parent_id="p"),
        array("I", [1, 2]),
        array("I", [3]),
        array("I", [1, 2, 3, 4]),
        0,
        BLOCK,
    )
    assert short.cause is Cause.PARTIAL_BLOCK
    assert diagnostics(short)["reason"] == "input_changed"
