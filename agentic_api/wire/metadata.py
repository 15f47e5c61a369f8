"""OpenAI's metadata rules: at most 16 string pairs, keys ≤ 64 and values ≤ 512 characters."""

from __future__ import annotations

from typing import Any

from agentic_api.errors import InvalidRequest
from agentic_api.wire.limits import (
    MAX_METADATA_KEY_LENGTH,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_LENGTH,
)
from agentic_api.wire.storable import check_no_nul


def check_metadata(value: Any, param: str = "metadata") -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest(f"'{param}' must be an object of strings.", param=param)
    if len(value) > MAX_METADATA_PAIRS:
        raise InvalidRequest(
            f"'{param}' may hold at most {MAX_METADATA_PAIRS} pairs, got {len(value)}.",
            param=param,
            code="metadata_too_large",
        )
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY_LENGTH:
            raise InvalidRequest(
                f"'{param}' keys may be at most {MAX_METADATA_KEY_LENGTH} characters.",
                param=f"{param}.{key[:20]}",
                code="metadata_too_large",
            )
        if not isinstance(item, str):
            raise InvalidRequest(f"'{param}.{key}' must be a string.", param=f"{param}.{key}")
        if len(item) > MAX_METADATA_VALUE_LENGTH:
            raise InvalidRequest(
                f"'{param}' values may be at most {MAX_METADATA_VALUE_LENGTH} characters.",
                param=f"{param}.{key}",
                code="metadata_too_large",
            )
        # Metadata is filtered on by the database (admin queries): a JSONB column, which
        # cannot hold NUL.
        check_no_nul(key, param)
        check_no_nul(item, f"{param}.{key}")
    return dict(value)
