"""What a turn will do about its token ids, decided before it is sent (turns/runner/tokens.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agentic_api.cache.accounting import TokenAccount
from agentic_api.cache.recent import TokenArtifact
from agentic_api.storage.models import TokenArtifactRow
from agentic_api.upstream.capabilities import TokenCapabilities

# Added to the upstream body when the turn's ids are wanted (vLLM's extension).
TOKEN_IDS_FIELD = {"enable_response_messages": True}


@dataclass
class TokenPlan:
    capabilities: TokenCapabilities
    # The engine's KV block size (setting, its /metrics, its KV events); None: unknown,
    # and so is every continuation's account.
    block_size: int | None
    # Whether the upstream request asks for token ids.
    asked: bool
    # The parent's exact tokens, read while the model runs; a string says why there are
    # none. None: the turn has no parent (a first turn).
    parent: asyncio.Task[TokenArtifact | str] | None = None


@dataclass(frozen=True)
class TokenRecord:
    """What the commit stores: the artifact (None when this turn's ids are missing) and
    the account (always); ``kept`` is the artifact as this process keeps it."""

    artifact: TokenArtifactRow | None
    kept: TokenArtifact | None
    account: TokenAccount
