"""The typed view of a stored reuse account (``cache/accounting.py``'s ``to_dict``), as
the admin API emits it; ``operator/handlers/admin/token_account.py`` fills it in."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class TokenDivergence(BaseModel):
    offset: int = Field(description="Token index where this prompt first parts from the parent's.")
    region: Literal["prompt", "output"] = Field(
        description="Inside the parent's own prompt, or inside what the parent generated."
    )
    parent_tokens: list[int] = Field(description="The parent's tokens from there (a few).")
    child_tokens: list[int] = Field(description="This prompt's tokens from there (a few).")
    parent_pieces: list[str] | None = Field(
        description="parent_tokens decoded one by one (null until decoded, or if the "
        "upstream cannot detokenize)."
    )
    child_pieces: list[str] | None
    realigned: bool = Field(
        description="The parent's tokens all reappear after local re-splits (re-tokenization)."
    )
    splits: int
    remainder: int | None = Field(
        default=None, description="Parent tokens from the divergence to the parent's end."
    )


class CacheWriteView(BaseModel):
    engine: int = Field(
        description="Prompt tokens the engine reported writing to its prefix cache "
        "(usage.input_tokens_details.cache_write_tokens)."
    )
    expected: int = Field(
        description="Ours: the prompt's full blocks that were not already cached."
    )
    agrees: bool


class TokenAccountView(BaseModel):
    status: Literal["exact", "diverged", "cold_start", "unknown"]
    token_exact: bool = Field(
        description="The parent's prompt + output ids are a prefix of this prompt's ids."
    )
    parent_id: str | None
    block_size: int | None
    parent_tokens: int | None = Field(description="The parent's prompt + output tokens.")
    prompt_tokens: int | None
    reusable_tokens: int | None = Field(
        description="Longest common token prefix with the parent's prompt + output."
    )
    expected_cached: int | None = Field(
        description="Cached tokens vLLM should report: full blocks of the reusable prefix "
        "(never the last prompt token, nor the parent's last output token)."
    )
    measured_cached: int | None = Field(description="cached_tokens as the upstream reported.")
    ideal_cached: int | None = Field(
        description="What a token-exact continuation would have been served."
    )
    cause: str | None = Field(
        description="The main cause of lost tokens: retokenization, template, fingerprint, "
        "history_edited, context_compacted, not_resident, partial_block, cold_start; null "
        "when none."
    )
    lost: dict[str, int] = Field(
        description="Parent tokens this prompt could not reuse of the parent's, by cause; "
        "what other requests' blocks served instead is extra_cached, not taken off."
    )
    extra_cached: int = Field(
        description="Cached beyond expected: blocks another request stored (a sibling, a "
        "shared prefix), served whatever the parent could give."
    )
    divergence: TokenDivergence | None
    changes: list[str] = Field(description="Fingerprint components changed since the parent.")
    reason: str | None = Field(description="Why the account is unknown.")
    cache_write: CacheWriteView | None = Field(
        default=None,
        description="The engine's own cache writes against ours; null when the engine "
        "reports none (or the block size is unknown).",
    )
    explanation: str
