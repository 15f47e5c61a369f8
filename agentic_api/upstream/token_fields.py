"""The token ids vLLM reports with ``enable_response_messages: true``, taken out of its
answer before anyone else sees it.

vLLM 0.32 adds ``input_messages`` and ``output_messages`` to the response object (JSON,
and the streamed terminal event's ``response``): lists of ``{"type":
"raw_message_tokens", "message": <text>, "tokens": [ids]}``, where "tokens is the source
of truth". For a plain turn there is one of each: the prompt the engine prefilled and
what it generated. Harmony models return Harmony messages there instead (no ids), and
vLLM's own tool loop appends later prompts to ``output_messages``; both are reported as
missing ids, never guessed at, and so is any disagreement with ``usage``.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

# Fields of vLLM's answer that are ours alone: never relayed, echoed or stored.
ENGINE_ONLY_FIELDS = ("input_messages", "output_messages")
_NOT_U32 = "the upstream returned token ids that are not unsigned 32-bit integers"
_WITHOUT_IDS = "the upstream returned messages without token ids (e.g. Harmony messages)"


@dataclass(frozen=True)
class ReportedTokens:
    """One upstream request's exact token ids, with the usage reported beside them."""

    prompt: array[int]
    output: array[int]
    cached_tokens: int | None
    # The engine's own count of the prompt tokens it wrote to its prefix cache
    # (``usage.input_tokens_details.cache_write_tokens``), when it reports one.
    cache_write_tokens: int | None = None


@dataclass(frozen=True)
class MissingTokens:
    """The upstream's answer carried no usable ids; ``reason`` says why, in words."""

    reason: str
    cached_tokens: int | None = None
    # The upstream gives no ids for this model at all (it ignored the field, or answers
    # with messages that have none), as opposed to a bad answer this once.
    absent: bool = False


def take_reported_tokens(final: dict[str, Any]) -> ReportedTokens | MissingTokens:
    """Removes the engine-only fields from ``final`` (always) and returns their ids."""
    raw = {name: final.pop(name, None) for name in ENGINE_ONLY_FIELDS}
    found_usage = final.get("usage")
    usage: dict[str, Any] = found_usage if isinstance(found_usage, dict) else {}
    cached = _cached_tokens(usage)
    if raw["input_messages"] is None and raw["output_messages"] is None:
        return MissingTokens("the upstream returned no token ids", cached, absent=True)
    prompt = _ids_of(raw["input_messages"])
    output = _ids_of(raw["output_messages"])
    if isinstance(prompt, str) or isinstance(output, str):
        reason = str(prompt if isinstance(prompt, str) else output)
        return MissingTokens(reason, cached, absent=reason == _WITHOUT_IDS)
    for what, ids, key in (("prompt", prompt, "input_tokens"), ("output", output, "output_tokens")):
        counted = usage.get(key)
        if isinstance(counted, int) and counted != len(ids):
            return MissingTokens(
                f"{len(ids)} {what} token ids but usage.{key} is {counted}", cached
            )
    return ReportedTokens(prompt, output, cached, _detail(usage, "cache_write_tokens"))


def _ids_of(messages: Any) -> array[int] | str:
    """The concatenated ids of a list of raw messages, or why there are none."""
    if not isinstance(messages, list):
        return "the upstream's token messages are not a list"
    ids: array[int] = array("I")
    for message in messages:
        tokens = message.get("tokens") if isinstance(message, dict) else None
        if not isinstance(tokens, list):
            return _WITHOUT_IDS
        # Checked in C, not token by token in Python: a prompt at depth 200 has thousands
        # of ids, and the per-token check was ~15% of the server's CPU per turn there.
        # array('I') refuses what is not an int or outside 0..2**32-1; only bools (ints
        # to it) need looking for.
        if bool in set(map(type, tokens)):
            return _NOT_U32
        try:
            ids.extend(tokens)
        except (TypeError, OverflowError):
            return _NOT_U32
    return ids


def _cached_tokens(usage: dict[str, Any]) -> int | None:
    return _detail(usage, "cached_tokens")


def _detail(usage: dict[str, Any], key: str) -> int | None:
    details = usage.get("input_tokens_details")
    value = details.get(key) if isinstance(details, dict) else None
    return value if type(value) is int else None
