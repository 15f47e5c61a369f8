"""How the admin views show a keep-warm re-warm (``cache/keep_warm.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class AdminRewarm(BaseModel):
    object: Literal["admin.rewarm"] = "admin.rewarm"
    at: float = Field(description="When it was sent (Unix seconds).")
    reason: str = Field(description="Why: the paused turn's prefix was evicted while paused.")
    replica: str | None = Field(description="The replica whose KV events showed the eviction.")
    resident_before: int | None = Field(
        description="Leading tokens of the paused turn's prompt + output still resident "
        "there; null when this process had no token ids for it."
    )
    estimated_tokens: int = Field(description="Tokens to prefill, as estimated beforehand.")
    pressure_checked: bool = Field(
        description="Whether the replica's own /metrics was read for the pressure bound "
        "(false: no metrics URL configured for it)."
    )
    expected_return_at: float | None = Field(
        None,
        description="When the agent was expected back (Unix seconds: the pause's start "
        "plus the median of the session's earlier pauses); null with no earlier pause.",
    )
    outcome: Literal["running", "done", "paid_off", "wasted", "cancelled", "failed"] = Field(
        description="running; done (awaiting the next turn); paid_off (the next turn came "
        "back warm); wasted (it did not, or never came within the TTL); cancelled (the "
        "agent came back first); failed."
    )
    input_tokens: int | None = Field(description="The prompt vLLM saw for it.")
    cached_tokens: int | None = Field(description="What vLLM already held of it.")
    spent_tokens: int = Field(description="What vLLM prefilled for it (input minus cached).")
    next_cached_tokens: int | None = Field(description="The next turn's cached tokens.")
    finished_at: float | None
    error: str | None
