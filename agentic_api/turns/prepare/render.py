"""The upstream request: one stateless /v1/responses call carrying the whole history.

The body is assembled from the items' stored bytes rather than re-serialized, so turn
N+1's ``input`` starts with exactly the bytes of turn N's ``input`` and output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentic_api.cache.residency.tags import SessionTags
from agentic_api.mcp.specs import is_mcp
from agentic_api.settings import Settings
from agentic_api.wire.create_fields import upstream_include
from agentic_api.wire.items import Item
from agentic_api.wire.mcp import CLIENT_ONLY_TYPES
from agentic_api.wire.reasoning_seal import reasoning_content
from agentic_api.wire.requests import CreateResponseRequest
from agentic_api.wire.summary import COMPACTION_TRIGGER, summary_message
from lineage import ResponseLineage, canonical_json

# Request fields sent upstream with the client's value when it gave one: both the ones the
# upstream implements ("forwarded" in wire/create_fields.py) and some of ours that it also
# reads (max_tool_calls, prompt_cache_key, ...).
_SENT_UPSTREAM = (
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
    "truncation",
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
    for name in _SENT_UPSTREAM:
        value = getattr(request, name)
        if value is not None:
            fields[name] = value
    reasoning = request.upstream_reasoning()
    if reasoning is not None:
        fields["reasoning"] = reasoning
    include = upstream_include(request.include)
    if include:
        # Only the values the upstream acts on; the rest are ours (wire/create_fields.py).
        fields["include"] = include
    fields.update(request.passthrough())
    if any(is_mcp(tool) for tool in fields.get("tools") or ()):
        # MCP servers are the gateway's to call (turns/kinds/tool_loop.py presents their
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
    _drop_client_agentic_context(fields)
    return fields


# vllm-router's program scheduling reads this key of ``vllm_xargs``: who the request
# belongs to and whether the session will be back. It steers where the router keeps and
# sends a session, so only we may set it, from our lineage; a client's value is dropped.
AGENTIC_CONTEXT = "agentic_context"


@dataclass(frozen=True)
class AgenticContext:
    """Sends ``vllm_xargs.agentic_context`` (setting ``router_agentic_context``)."""

    kv_retention_ttl_seconds: float | None = None

    def render(
        self, lineage: ResponseLineage, request: CreateResponseRequest, agent: str | None = None
    ) -> str:
        # One program per session: forks of a chain share their session, hence its
        # program and its prefix; a chain has no parent program. Nothing here changes
        # from turn to turn of a session except ``expected_resume``, so a router that
        # compares request bodies sees the same head every time. ``agent``: an agent of a
        # multi-agent tree (turns/kinds/multi_agent/): the root's session stays the
        # program, the agent is the task (and it will be back: it waits on others).
        resumes = bool(request.tools) and request.tool_choice != "none"
        context: dict[str, Any] = {
            "program_id": f"{lineage.session_id}:lead",
            "task_id": lineage.session_id if agent is None else f"{lineage.session_id}{agent}",
            "session_id": lineage.session_id,
            "agent_id": "lead" if agent is None else agent,
            "expected_resume": resumes or agent is not None,
        }
        if resumes and self.kv_retention_ttl_seconds is not None:
            context["kv_retention_ttl_seconds"] = self.kv_retention_ttl_seconds
        # A JSON string, not an object: vLLM accepts only scalars (or lists of them) as
        # vllm_xargs values and answers 400 to a nested object; the router decodes both.
        return canonical_json(context).decode()


def agentic_context_of(settings: Settings) -> AgenticContext | None:
    if not settings.router_agentic_context:
        return None
    return AgenticContext(settings.router_kv_retention_ttl_seconds)


def add_agentic_context(
    fields: dict[str, Any],
    lineage: ResponseLineage,
    request: CreateResponseRequest,
    context: AgenticContext | None,
    agent: str | None = None,
) -> None:
    if context is None:
        return
    xargs = fields.get("vllm_xargs")
    if xargs is not None and not isinstance(xargs, dict):
        return  # the client's malformed value goes as sent; the model server refuses it
    rendered = context.render(lineage, request, agent)
    fields["vllm_xargs"] = {**(xargs or {}), AGENTIC_CONTEXT: rendered}


def _drop_client_agentic_context(fields: dict[str, Any]) -> None:
    xargs = fields.get("vllm_xargs")
    if isinstance(xargs, dict) and AGENTIC_CONTEXT in xargs:
        rest = {key: value for key, value in xargs.items() if key != AGENTIC_CONTEXT}
        if rest:
            fields["vllm_xargs"] = rest
        else:
            del fields["vllm_xargs"]


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
    model servers do not know and get as the message their summary stands for,
    reasoning items, made acceptable to vLLM (``reasoning_for_model``), and items that
    carry nothing for the model, which are not sent at all (None): MCP bookkeeping (tool
    listings, approval requests and answers) and the ``compaction_trigger`` a compacting
    turn was asked with.

    Each is a function of the stored bytes alone, so every turn that replays an item
    sends the model the same bytes for it and the upstream prefix stays identical."""
    if item.type == "compaction":
        return summary_message(item.as_dict())
    if item.type in CLIENT_ONLY_TYPES or item.type == COMPACTION_TRIGGER:
        return None
    if item.type == "reasoning":
        return reasoning_for_model(item)
    return item.data


def reasoning_for_model(item: Item) -> bytes:
    """A reasoning item as vLLM accepts it back. vLLM 0.32 refuses (400, "Encrypted
    content is not supported") any item with a non-empty ``encrypted_content`` (Codex
    sends back what OpenAI encrypted, opaque to any other model server, or what this
    server sealed, whose content is then restored) and requires a ``summary`` list; it
    reads the readable parts, ``content`` else ``summary``. Those are kept; the
    encrypted part is sent as null. The stored item (what the client sent, what
    listings show and the prefix digest covers) is untouched."""
    value = item.as_dict()
    fixed = dict(value)
    if fixed.get("encrypted_content"):
        # Ours (include: reasoning.encrypted_content) holds the content a client such
        # as Codex leaves out when it sends the item back (wire/reasoning_seal.py).
        content = reasoning_content(fixed)
        if content is not None:
            fixed["content"] = content
        fixed["encrypted_content"] = None
    if not isinstance(fixed.get("summary"), list):
        fixed["summary"] = []
    return item.data if fixed == value else canonical_json(fixed)


def upstream_headers(lineage: ResponseLineage) -> dict[str, str]:
    return lineage.headers()
