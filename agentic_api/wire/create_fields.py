"""What this server does with each request field OpenAI defines for ``POST /v1/responses``.

Every field of the SDK's ``ResponseCreateParams`` (openai 3.57) is in ``FIELDS`` with one
of three answers, so no field a client sets is silently dropped:

- ``ours``: this server implements it (state, lineage, queueing, echo);
- ``forwarded``: sent to the upstream, which implements it (vLLM validates the value and
  refuses what it does not support, before the turn begins, so nothing is stored);
- ``refused``: nothing here or upstream implements it: a 400 ``unsupported_parameter``
  naming it. A field implemented for some values only refuses the others with
  ``unsupported_value``.

Fields OpenAI does not define (vLLM's own extensions such as ``top_k``, Codex's extras) are
passed through as given: the upstream decides about those. README's compatibility table
says the same, field by field; ``tests/api/test_create_fields.py`` walks the SDK's type to
keep both complete.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentic_api.errors import InvalidRequest
from agentic_api.wire.limits import MAX_ID_LENGTH
from agentic_api.wire.storable import check_no_nul

Handling = Literal["ours", "forwarded", "refused"]

# ``reasoning.context``, as the SDK types it (openai 3.63).
REASONING_CONTEXTS = ("auto", "current_turn", "all_turns")


@dataclass(frozen=True)
class FieldPolicy:
    handling: Handling
    # What the compatibility table says about it.
    note: str
    # For a field we implement for some values only: refuses the others.
    check: Callable[[Any], None] | None = None


def _unsupported_value(param: str, value: Any, accepted: str) -> InvalidRequest:
    return InvalidRequest(
        f"Unsupported value for '{param}': {value!r}. This server supports {accepted}.",
        param=param,
        code="unsupported_value",
    )


def _only(param: str, key: str, accepted: tuple[Any, ...]) -> Callable[[Any], None]:
    """A check that the object ``param`` sets ``key`` (when it sets it) to an accepted value."""

    def check(value: Any) -> None:
        if not isinstance(value, Mapping) or key not in value:
            return
        if value[key] not in accepted:
            shown = " or ".join(repr(item) for item in accepted)
            raise _unsupported_value(f"{param}.{key}", value[key], shown)

    return check


def _only_value(param: str, accepted: tuple[Any, ...]) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value is not None and value not in accepted:
            shown = " or ".join(repr(item) for item in accepted)
            raise _unsupported_value(param, value, shown)

    return check


def _every(*checks: Callable[[Any], None]) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        for one in checks:
            one(value)

    return check


# The smallest ``compact_threshold`` accepted: OpenAI's documentation states none, and a
# summary request (the history, a question, up to 2048 tokens of summary) below this size
# would cost more than the context it saves.
MIN_COMPACT_THRESHOLD = 1000


def _context_management(value: Any) -> None:
    """``context_management``: a list of at most one ``compaction`` entry whose threshold
    is an integer of at least ``MIN_COMPACT_THRESHOLD`` (null or absent: no compaction)."""
    if value is None:
        return
    if not isinstance(value, list):
        raise InvalidRequest(
            "'context_management' must be an array of context-management entries.",
            param="context_management",
            code="invalid_type",
        )
    if len(value) > 1:
        raise InvalidRequest(
            "'context_management' takes at most one entry (one 'compaction' strategy).",
            param="context_management",
            code="invalid_value",
        )
    for index, entry in enumerate(value):
        param = f"context_management[{index}]"
        if not isinstance(entry, Mapping):
            raise InvalidRequest(f"'{param}' must be an object.", param=param, code="invalid_type")
        if entry.get("type") != "compaction":
            raise _unsupported_value(f"{param}.type", entry.get("type"), "'compaction'")
        unknown = sorted(set(entry) - {"type", "compact_threshold"})
        if unknown:
            raise InvalidRequest(
                f"Unknown parameter: '{param}.{unknown[0]}'.",
                param=f"{param}.{unknown[0]}",
                code="unknown_parameter",
            )
        threshold = entry.get("compact_threshold")
        if threshold is None:
            raise InvalidRequest(
                f"Missing required parameter: '{param}.compact_threshold'.",
                param=f"{param}.compact_threshold",
                code="missing_required_parameter",
            )
        if isinstance(threshold, bool) or not isinstance(threshold, int):
            raise InvalidRequest(
                f"'{param}.compact_threshold' must be an integer.",
                param=f"{param}.compact_threshold",
                code="invalid_type",
            )
        if threshold < MIN_COMPACT_THRESHOLD:
            raise InvalidRequest(
                f"'{param}.compact_threshold' must be at least {MIN_COMPACT_THRESHOLD}; "
                f"got {threshold}.",
                param=f"{param}.compact_threshold",
                code="integer_below_min_value",
            )


FIELDS: dict[str, FieldPolicy] = {
    "access_programs": FieldPolicy(
        "refused", "OpenAI's domain access programs; no open-weight server has them"
    ),
    "background": FieldPolicy("ours", "durable background jobs, cancellable, resumable"),
    "background_options": FieldPolicy(
        "ours",
        "completion_window orders the background queue (soonest first, then 2h, then 8h); "
        "continuation_id groups related jobs (a group's jobs run in the order they were "
        "queued) and is echoed",
    ),
    "context_management": FieldPolicy(
        "ours",
        "[{type: 'compaction', compact_threshold: N}] (N >= 1000): a turn whose input passes "
        "N tokens is compacted first, then answered on the compacted window (the Agents SDK "
        "sets it in ModelSettings; Codex 0.169 cannot send it and compacts with "
        "compaction_trigger instead)",
        _context_management,
    ),
    "conversation": FieldPolicy("ours", "conversations stored and continued here"),
    "image": FieldPolicy(
        "ours",
        "context_compression: 'auto' and 'disabled' (no image context is compressed); "
        "'enabled' is refused",
        _only("image", "context_compression", ("auto", "disabled")),
    ),
    "include": FieldPolicy(
        "ours",
        "per value (INCLUDABLE): 'message.output_text.logprobs' forwarded (vLLM returns the "
        "logprobs); 'reasoning.encrypted_content' and 'message.input_image.image_url' "
        "honoured here; the values of tools that never run here (file_search, web_search, "
        "computer, code_interpreter) refused with unsupported_value; unknown values are a "
        "400 invalid_value",
    ),
    "input": FieldPolicy("ours", "normalized, stored and replayed verbatim"),
    "instructions": FieldPolicy("ours", "rendered first; not inherited, as OpenAI does"),
    "max_output_tokens": FieldPolicy("forwarded", "the upstream stops there"),
    "max_tool_calls": FieldPolicy("ours", "bounds the gateway's MCP tool calls; forwarded"),
    "metadata": FieldPolicy("ours", "stored and echoed (16 pairs, 64 / 512 characters)"),
    "model": FieldPolicy(
        "forwarded",
        "the upstream's served model name; one it does not serve is 404 model_not_found",
    ),
    "moderation": FieldPolicy("refused", "no moderation model runs here"),
    "parallel_tool_calls": FieldPolicy("forwarded", "the upstream's tool-call parser decides"),
    "previous_response_id": FieldPolicy("ours", "chains rehydrated from storage"),
    "prompt": FieldPolicy(
        "refused",
        "deprecated: OpenAI shut saved prompts down on 2026-11-30 and none exist here; "
        "send the prompt's instructions and input instead",
    ),
    "prompt_cache_key": FieldPolicy(
        "ours", "the session coordinate of a chain's root; forwarded (vLLM ignores it)"
    ),
    "prompt_cache_options": FieldPolicy(
        "ours",
        "comparison_response_id answers prompt_cache_diagnostics against any of the "
        "tenant's responses; mode 'implicit' and ttl '30m' only (vLLM caches every full "
        "block until evicted: no breakpoints, no lifetimes; echoed, not enforced); "
        "prewarm: true sends the prompt upstream for one output token and stores nothing; "
        "'explicit' and '12h' are refused",
        _every(
            _only("prompt_cache_options", "mode", ("implicit",)),
            _only("prompt_cache_options", "ttl", ("30m",)),
        ),
    ),
    "prompt_cache_retention": FieldPolicy(
        "ours",
        "'in_memory' only: vLLM's prefix cache lives in the engine's memory, with no "
        "retention to extend; '24h' is refused",
        _only_value("prompt_cache_retention", ("in_memory",)),
    ),
    "reasoning": FieldPolicy(
        "forwarded",
        "effort and summary for reasoning models; 'context' (auto, current_turn, "
        "all_turns) is ours: which earlier reasoning items are sent back to the model, "
        "echoed as the effective mode",
        _only("reasoning", "context", (None, *REASONING_CONTEXTS)),
    ),
    "safety_identifier": FieldPolicy(
        "ours", "stored and echoed; no usage-policy checks run on it here"
    ),
    "service_tier": FieldPolicy(
        "ours",
        "'auto' and 'default' (every request is served the same way); 'flex', 'scale', "
        "'priority', 'fast' and 'ultrafast' are refused",
        _only_value("service_tier", ("auto", "default")),
    ),
    "store": FieldPolicy("ours", "false stores nothing retrievable"),
    "stream": FieldPolicy("ours", "server-sent events, relayed with our ids"),
    "stream_options": FieldPolicy(
        "ours",
        "include_obfuscation: false only (events carry no obfuscation field); true is refused",
        _only("stream_options", "include_obfuscation", (False,)),
    ),
    "temperature": FieldPolicy("forwarded", "sampling"),
    "text": FieldPolicy("forwarded", "format (structured outputs) and verbosity"),
    "tool_choice": FieldPolicy("forwarded", "the upstream's tool-call parser decides"),
    "tools": FieldPolicy(
        "ours", "function tools forwarded; MCP tools called by the gateway; others forwarded"
    ),
    "top_logprobs": FieldPolicy("forwarded", "sampling"),
    "top_p": FieldPolicy("forwarded", "sampling"),
    "truncation": FieldPolicy("forwarded", "vLLM truncates the prompt with 'auto'"),
    "user": FieldPolicy("forwarded", "stored and echoed"),
}


# What this server does with each ``include`` value openai 3.63 defines
# (``ResponseIncludable``): the same three answers as the fields themselves.
INCLUDABLE: dict[str, FieldPolicy] = {
    "message.output_text.logprobs": FieldPolicy(
        "forwarded", "vLLM returns each output text part's logprobs (with top_logprobs)"
    ),
    "message.input_image.image_url": FieldPolicy(
        "ours", "input items are stored and listed as sent: an image's URL is always there"
    ),
    "reasoning.encrypted_content": FieldPolicy(
        "ours",
        "each reasoning item carries encrypted_content: its reasoning sealed by this "
        "server, replayed to the model when the item comes back without its content "
        "(wire/reasoning_seal.py)",
    ),
    "file_search_call.results": FieldPolicy("refused", "no file_search tool runs here"),
    "web_search_call.results": FieldPolicy("refused", "no web_search tool runs here"),
    "web_search_call.action.sources": FieldPolicy("refused", "no web_search tool runs here"),
    "computer_call_output.output.image_url": FieldPolicy("refused", "no computer tool runs here"),
    "code_interpreter_call.outputs": FieldPolicy("refused", "no code interpreter runs here"),
}


def check_include(values: Sequence[str] | None, *, param: str) -> None:
    """Every ``include`` value is one OpenAI defines and one this server can honour: an
    unknown value is ``invalid_value``, a value nothing here implements
    ``unsupported_value``, each naming its position."""
    for index, value in enumerate(values or ()):
        policy = INCLUDABLE.get(value)
        where = f"{param}[{index}]"
        if policy is None:
            raise InvalidRequest(
                f"Invalid value for '{where}': {value!r}. Supported values are: "
                + ", ".join(repr(name) for name in INCLUDABLE)
                + ".",
                param=where,
                code="invalid_value",
            )
        if policy.handling == "refused":
            raise InvalidRequest(
                f"Unsupported value for '{where}': {value!r} ({policy.note}).",
                param=where,
                code="unsupported_value",
            )


def upstream_include(values: Sequence[str] | None) -> list[str]:
    """The ``include`` values the upstream acts on (the others are ours)."""
    return [v for v in values or () if INCLUDABLE[v].handling == "forwarded"]


def check_text_format(text: Mapping[str, Any] | None) -> None:
    """A ``json_schema`` text format carries its ``name`` and ``schema`` (both required by
    OpenAI): without them the upstream would answer free text where the client asked for
    structure."""
    form = text.get("format") if isinstance(text, Mapping) else None
    if not isinstance(form, Mapping) or form.get("type") != "json_schema":
        return
    for key, kind, shown in (("name", str, "a string"), ("schema", Mapping, "an object")):
        param = f"text.format.{key}"
        if key not in form or form[key] is None:
            raise InvalidRequest(
                f"Missing required parameter: '{param}'.",
                param=param,
                code="missing_required_parameter",
            )
        if not isinstance(form[key], kind):
            raise InvalidRequest(f"'{param}' must be {shown}.", param=param, code="invalid_type")


def refuse_unsupported(data: Mapping[str, Any]) -> None:
    """Raises the 400 for the first field (in the body's order) that nothing implements."""
    for name, value in data.items():
        policy = FIELDS.get(name)
        if policy is None:
            continue
        if policy.handling == "refused" and value is not None:
            raise InvalidRequest(
                f"Unsupported parameter: '{name}' is not supported by this server ({policy.note}).",
                param=name,
                code="unsupported_parameter",
            )
        if policy.check is not None:
            policy.check(value)


# ``prompt_cache_options`` (openai 3.57's ``PromptCacheOptions``) as this server applies it.

# vLLM's prefix cache is automatic: every full block of a computed prompt is cached and kept
# until the engine's LRU evicts it. So of OpenAI's options only what matches that is
# accepted: ``mode: implicit`` (``explicit`` with no breakpoints means "no caching" at OpenAI,
# and vLLM cannot turn caching off per request) and ``ttl: 30m`` (the default; vLLM has no
# lifetimes, so it is echoed as OpenAI's default, never as a promise: README says so).
# ``comparison_response_id`` asks for ``prompt_cache_diagnostics``. ``prewarm: true`` sends
# the turn's prompt upstream for the fewest output tokens vLLM accepts and stores nothing
# (``turns/prewarm.py``): the one lever vLLM offers to fill its cache ahead of a turn.


# What vLLM's automatic prefix cache can honour; README's "prompt_cache_options" row.
APPLIED_MODES = ("implicit",)

APPLIED_TTLS = ("30m",)


class PromptCacheOptions(BaseModel):
    """The request's options with the SDK's types; values we cannot honour are refused
    (``FIELDS`` above) with ``unsupported_value``."""

    model_config = ConfigDict(extra="forbid")
    comparison_response_id: str | None = Field(
        None, min_length=1, max_length=MAX_ID_LENGTH, strict=True
    )
    mode: Literal["implicit", "explicit"] = "implicit"
    ttl: Literal["30m", "12h"] = "30m"
    prewarm: bool = Field(False, strict=True)

    @field_validator("comparison_response_id")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        if value is not None:
            check_no_nul(value, "prompt_cache_options.comparison_response_id")
        return value

    def echoed(self) -> dict[str, Any]:
        """``Response.prompt_cache_options``: the options that were applied (``prewarm``
        only when it was: the SDK's echoed type has no such key, so a plain turn's echo
        keeps its exact shape)."""
        echoed: dict[str, Any] = {
            "mode": self.mode,
            "ttl": self.ttl,
            "comparison_response_id": self.comparison_response_id,
        }
        if self.prewarm:
            echoed["prewarm"] = True
        return echoed


def check_prewarm(options: PromptCacheOptions | None, *, background: bool) -> None:
    """What a prewarm cannot be combined with, refused before anything runs: it stores
    nothing, and a background response is a stored one; diagnostics come from a stored
    turn's token account."""
    if options is None or not options.prewarm:
        return
    if background:
        raise InvalidRequest(
            "A prewarm stores nothing, and a background response is stored: send "
            "prompt_cache_options.prewarm without 'background'.",
            param="background",
            code="invalid_value",
        )
    if options.comparison_response_id is not None:
        raise InvalidRequest(
            "prompt_cache_diagnostics are computed from a stored turn's token account, and "
            "a prewarm stores nothing: send comparison_response_id with the real turn.",
            param="prompt_cache_options.comparison_response_id",
            code="invalid_value",
        )
