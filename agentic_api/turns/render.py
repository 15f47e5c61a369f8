"""The upstream request: one stateless /v1/responses call carrying the whole history.

The body is assembled from the items' stored bytes rather than re-serialized, so turn
N+1's ``input`` starts with exactly the bytes of turn N's ``input`` and output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentic_api.cache.residency.tags import SessionTags
from agentic_api.mcp.specs import is_mcp
from agentic_api.wire.items import Item
from agentic_api.wire.mcp import CLIENT_ONLY_TYPES
from agentic_api.wire.requests import CreateResponseRequest
from agentic_api.wire.summary import COMPACTION_TRIGGER, summary_message
from lineage import ResponseLineage, canonical_json

# Request fields we read and forward with the client's value when it gave one.
_FORWARDED = (
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_output_tokens",
    "max_tool_calls",
    "temperature",
    "top_p",
    "top_logprobs",
    "text",
    "reasoning",
    "truncation",
    "include",
    "prompt_cache_key",
    "user",
    "safety_identifier",
    "service_tier",
)


def upstream_fields(
    request: CreateResponseRequest,
    *,
    cache_salt: str,
    session_id: str | None = None,
    tags: SessionTags | None = None,
) -> dict[str, Any]:
    fields: dict[str, Any] = {"model": request.model}
    for name in _FORWARDED:
        value = getattr(request, name)
        if value is not None:
            fields[name] = value
    fields.update(request.passthrough())
    if any(is_mcp(tool) for tool in fields.get("tools") or ()):
        # MCP servers are the gateway's to call (turns/tool_loop.py presents their
        # tools as functions); a model server that knows MCP must never call them.
        fields["tools"] = [tool for tool in fields["tools"] if not is_mcp(tool)]
    # Ours to decide, whatever the client sent: the upstream keeps nothing, streams to
    # us, and caches under the tenant's salt only.
    fields["store"] = False
    fields["stream"] = streams_upstream(request)
    fields["cache_salt"] = cache_salt
    if session_id is not None:
        # So the replica's KV events name the session even where no header reaches it.
        (tags or SessionTags()).apply(fields, session_id)
    fields.pop("input", None)
    return fields


def streams_upstream(request: CreateResponseRequest) -> bool:
    """Stream from the upstream only when someone consumes events as they come: relaying
    and parsing every delta costs time a client waiting for one JSON body never sees."""
    return request.stream or request.background


def render_body(fields: dict[str, Any], items: Sequence[Item]) -> bytes:
    head = canonical_json(fields)
    parts = [head[:-1], b',"input":[']
    first = True
    for item in items:
        data = upstream_bytes(item)
        if data is None:
            continue
        if not first:
            parts.append(b",")
        first = False
        parts.append(data)
    parts.append(b"]}")
    return b"".join(parts)


def upstream_bytes(item: Item) -> bytes | None:
    """An item as the upstream receives it: verbatim, except compaction items, which
    model servers do not know and get as the message their summary stands for, and
    items that carry nothing for the model, which are not sent at all (None): MCP
    bookkeeping (tool listings, approval requests and answers) and the
    ``compaction_trigger`` a compacting turn was asked with."""
    if item.type == "compaction":
        return summary_message(item.as_dict())
    if item.type in CLIENT_ONLY_TYPES or item.type == COMPACTION_TRIGGER:
        return None
    return item.data


def upstream_headers(lineage: ResponseLineage) -> dict[str, str]:
    return lineage.headers()
