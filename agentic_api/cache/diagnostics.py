"""``Response.prompt_cache_diagnostics`` (openai 3.57) from a reuse account.

OpenAI answers one of four shapes: ``cache_hit``; ``cache_miss`` with a ``reason``
(what differs from the compared response) and token counts; ``comparison_response_not_found``;
``unavailable``. Our account knows more causes than OpenAI has reasons: each maps to the
reason that names what the client changed, or, where the client changed nothing
(re-tokenization, the chat template, eviction), to the honest nearest one; README's
"Prompt cache diagnostics" table is this module's ``REASONS`` and ``COMPONENT_REASONS``.
A hit is only claimed when vLLM reported cached tokens and nothing but the cut last
block of the shared prefix was lost.
"""

from __future__ import annotations

from typing import Any

from agentic_api.cache.accounting import Cause, Status, TokenAccount

# A changed fingerprint component (lineage/fingerprint.py) as the reason OpenAI names.
COMPONENT_REASONS = {
    "model": "model_changed",
    # The tenant's cache salt rotated: the cache partition changed, as with another key.
    "salt_epoch": "prompt_cache_key_changed",
    "tools": "tools_changed",
    "tool_choice": "tools_changed",
    "parallel_tool_calls": "tools_changed",
    # The fingerprint keeps a digest of ``text``: format and verbosity are not told apart.
    "text": "text_format_changed",
    "reasoning": "reasoning_effort_changed",
    # Earlier reasoning items left out or sent back: the rendered input itself differs.
    "reasoning_context": "input_changed",
    # OpenAI has no instructions reason: they are the first input the model reads.
    "instructions": "input_changed",
    "truncation": "input_changed",
    "tokenizer": "input_changed",
}
# A cause of lost tokens, other than a fingerprint change, as the nearest reason.
REASONS = {
    Cause.HISTORY_EDITED: "input_changed",
    # The answer sent back as text came back as other tokens: the input differs by token.
    Cause.RETOKENIZATION: "input_changed",
    # The chat template dropped or rewrote earlier content: the rendered input differs.
    Cause.TEMPLATE: "input_changed",
    # The same prefix was no longer cached (evicted, or held by another replica): the
    # cache that held it is not the one that served, as when requests change cache key.
    Cause.NOT_RESIDENT: "prompt_cache_key_changed",
}
UNAVAILABLE: dict[str, Any] = {"type": "unavailable"}
NOT_FOUND: dict[str, Any] = {"type": "comparison_response_not_found"}


def diagnostics(made: TokenAccount) -> dict[str, Any]:
    """The diagnostics of a turn whose account was made against the compared response:
    its prompt + output when it is the turn's parent, its prompt alone otherwise (the
    turn does not continue it: ``turns/runner/tokens.py``)."""
    if made.status in (Status.UNKNOWN, Status.COLD_START) or made.measured_cached is None:
        return dict(UNAVAILABLE)
    measured = made.measured_cached
    real_losses = [c for c, n in made.lost.items() if n and c is not Cause.PARTIAL_BLOCK]
    if measured > 0 and not real_losses:
        return {"type": "cache_hit"}
    return {
        "type": "cache_miss",
        "reason": _reason(made),
        # The input tokens computed instead of served from the cache.
        "cache_missed_tokens": max(0, (made.prompt_tokens or 0) - measured),
        "comparison_reusable_tokens": made.reusable_tokens,
    }


def _reason(made: TokenAccount) -> str:
    if made.cause is Cause.FINGERPRINT:
        for component in made.changes:
            if component in COMPONENT_REASONS:
                return COMPONENT_REASONS[component]
        return "input_changed"
    if made.cause in REASONS:
        return REASONS[made.cause]
    # Nothing but a partial block lost and nothing served: the shared prefix is shorter
    # than one cache block, so no input could be reused.
    return "input_changed"
