"""Per-tenant ``cache_salt`` values for vLLM's prefix cache.

vLLM only shares KV-cache blocks between requests with the same salt, so the
salt is what keeps one tenant from probing another's prompts through cache
timing. We mint it from a server secret (never accept it from clients): an
HMAC is unpredictable without the secret, distinct per tenant and per epoch,
and stable for a given (tenant, epoch), which is what keeps reuse alive
across a tenant's turns. Bumping the epoch rotates the salt.
"""

from __future__ import annotations

import hashlib
import hmac

from lineage._framing import frame

__all__ = ["CACHE_SALT_MAX_LENGTH", "is_valid_cache_salt", "mint_cache_salt"]

CACHE_SALT_MAX_LENGTH = 128
_FORBIDDEN_CHARACTERS = frozenset("@/\\\x00")
_TAG = b"agentic-api/cache-salt/v1"


def mint_cache_salt(secret: bytes, tenant_id: str, epoch: int) -> str:
    """The salt for ``tenant_id`` in ``epoch``: 64 lowercase hex characters."""
    if not secret:
        raise ValueError("cache salt secret must not be empty")
    if not tenant_id:
        raise ValueError("tenant id must not be empty")
    if isinstance(epoch, bool) or epoch < 0:
        raise ValueError(f"salt epoch must be a non-negative integer, not {epoch!r}")
    message = frame(_TAG, tenant_id.encode("utf-8"), str(epoch).encode("ascii"))
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def is_valid_cache_salt(value: str) -> bool:
    """Whether vLLM accepts ``value`` as a ``cache_salt``."""
    return 0 < len(value) <= CACHE_SALT_MAX_LENGTH and _FORBIDDEN_CHARACTERS.isdisjoint(value)
