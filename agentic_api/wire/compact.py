"""The ``POST /v1/responses/compact`` body: the fields openai 3.63's
``ResponseCompactParams`` defines, and the ones Codex adds (``CompactionInput`` in its
``codex-api`` crate) so the summary request renders the chain's prompt as its turns did.
Anything else is refused by name, as on every other route: a field nothing reads must
not look accepted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentic_api.errors import InvalidRequest

# openai 3.63's ResponseCompactParams (tests/api/test_compact_fields.py holds the two equal).
SDK_COMPACT_FIELDS = frozenset(
    {
        "image",
        "input",
        "instructions",
        "model",
        "previous_response_id",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "safety_identifier",
        "service_tier",
    }
)
# What Codex sends beside them: forwarded with the summary request (its tools are
# rendered, tool_choice is "none"), so the compaction's prompt shares the chain's prefix.
CODEX_COMPACT_FIELDS = frozenset({"tools", "parallel_tool_calls", "reasoning", "text"})
COMPACT_FIELDS = SDK_COMPACT_FIELDS | CODEX_COMPACT_FIELDS


def check_compact_fields(data: Mapping[str, Any]) -> None:
    for name in data:
        if name not in COMPACT_FIELDS:
            raise InvalidRequest(
                f"Unknown parameter: '{name}'. /v1/responses/compact takes "
                + ", ".join(sorted(COMPACT_FIELDS))
                + ".",
                param=name,
                code="unknown_parameter",
            )
