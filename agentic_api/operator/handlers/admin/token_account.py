"""How a stored reuse account (``cache/accounting.py``'s ``to_dict``) is shown: as typed
fields and one sentence an operator can act on. Pure presentation of stored JSON, so
it needs nothing from the code that computed it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentic_api.operator.shapes.token_account import TokenAccountView

# Components that isolate the prefix cache (another salt, another model's KV).
_ISOLATING = ("model", "salt_epoch")


def account_view(stored: Mapping[str, Any]) -> TokenAccountView:
    data = {key: stored.get(key) for key in TokenAccountView.model_fields if key != "explanation"}
    data["lost"] = dict(stored.get("lost") or {})
    data["changes"] = list(stored.get("changes") or [])
    data["extra_cached"] = int(stored.get("extra_cached") or 0)
    data["token_exact"] = bool(stored.get("token_exact"))
    return TokenAccountView(**data, explanation=explain_account(stored))


def explain_account(stored: Mapping[str, Any]) -> str:
    """One sentence: what could be reused, what was, and why not the rest."""
    status = stored.get("status")
    measured = stored.get("measured_cached")
    if status == "unknown":
        return f"Token account unknown: {stored.get('reason') or 'no reason recorded'}."
    if status == "cold_start":
        shared = f" ({_n(measured)} tokens were cached from a prefix shared with other requests)"
        return (
            "First turn of its session: nothing of its own to reuse"
            + (shared if measured else "")
            + "."
        )
    lost: dict[str, int] = dict(stored.get("lost") or {})
    parent_tokens = stored.get("parent_tokens") or 0
    expected = stored.get("expected_cached") or 0
    isolated = any(change in _ISOLATING for change in stored.get("changes") or ())
    head = (
        f"Token-exact: the parent's {_n(parent_tokens)} prompt and output tokens start this "
        f"prompt; {_n(expected)} expected cached, {_n(measured)} measured"
        if status == "exact" and not isolated
        else _divergence_sentence(stored)
    )
    tail: list[str] = []
    if lost.get("not_resident"):
        tail.append(
            f"{_n(lost['not_resident'])} expected tokens were not cached: the prefix was not "
            "resident (evicted, or served by another replica)"
        )
    if lost.get("partial_block") and status == "exact":
        tail.append(
            f"the last {_n(lost['partial_block'])} agreeing tokens fall in a partial block of "
            f"{stored.get('block_size')}"
        )
    changes = [c for c in stored.get("changes") or () if c not in _ISOLATING]
    if status == "exact" and changes:
        tail.append(f"the {_join(changes)} changed, but not the rendered tokens")
    extra = stored.get("extra_cached") or 0
    if extra:
        tail.append(f"{_n(extra)} more were cached from a prefix shared with other requests")
    tail.extend(_cache_write_mismatch(stored))
    return head + ("; " + "; ".join(tail) if tail else "") + "."


def _cache_write_mismatch(stored: Mapping[str, Any]) -> list[str]:
    written = stored.get("cache_write") or {}
    if not written or written.get("agrees"):
        return []
    return [
        f"the engine reports writing {_n(written.get('engine'))} prompt tokens to its cache "
        f"where {_n(written.get('expected'))} were expected (its full blocks not cached)"
    ]


def _divergence_sentence(stored: Mapping[str, Any]) -> str:
    cause = stored.get("cause")
    divergence = stored.get("divergence") or {}
    offset = divergence.get("offset")
    lost = dict(stored.get("lost") or {})
    changes: Sequence[str] = stored.get("changes") or ()
    isolating = [c for c in changes if c in _ISOLATING]
    if isolating:
        return (
            f"The {_join(isolating)} changed, which isolates the prefix cache: none of the "
            f"parent's {_n(stored.get('parent_tokens'))} tokens could be reused"
            + (
                f" (measured {_n(stored.get('measured_cached'))})"
                if stored.get("measured_cached")
                else ""
            )
        )
    gone = lost.get(cause or "", 0) if cause else 0
    where = f"at token {_n(offset)}, in the parent's {divergence.get('region', 'history')}"
    if cause is None:
        # Only an account stored before version 2 (which took what other requests' blocks
        # served off the losses): nothing of the parent's counted lost.
        return (
            f"The prompt parts from the parent's {where}, yet nothing of the parent's was "
            f"lost: {_n(stored.get('measured_cached'))} tokens were served from the cache "
            f"(expected {_n(stored.get('expected_cached'))})"
        )
    after = (
        f"; {_n(stored.get('reusable_tokens'))} tokens agreed, {_n(gone)} of the parent's "
        f"after it could not be reused (expected {_n(stored.get('expected_cached'))}, "
        f"measured {_n(stored.get('measured_cached'))})"
    )
    if cause == "fingerprint":
        return f"The {_join(list(changes))} changed, so the rendered prompt differs {where}" + after
    if cause == "history_edited":
        return (
            f"The conversation's items were edited since the parent: the prompt differs {where}"
            + after
        )
    if cause == "context_compacted":
        return (
            f"The parent compacted its context, so its answer was made on the compacted "
            f"window and the prompt differs {where}" + after
        )
    if cause == "retokenization" and not divergence.get("realigned"):
        return (
            f"Re-tokenization diverged {where}: the answer was cut off inside a character, "
            f"and its last {_n(divergence.get('remainder'))} tokens cannot be sent back as text"
            + after
        )
    if cause == "retokenization":
        return f"Re-tokenization diverged {where}: {_split_words(divergence)}" + after
    generated = [t for t in stored.get("parent_output_types") or () if t != "message"]
    what = f" (the parent generated {_join(sorted(set(generated)))})" if generated else ""
    return f"The chat template dropped or rewrote earlier content {where}{what}" + after


def _split_words(divergence: Mapping[str, Any]) -> str:
    parent = divergence.get("parent_pieces") or divergence.get("parent_tokens") or []
    child = divergence.get("child_pieces") or divergence.get("child_tokens") or []
    return (
        f"{_count(len(parent))} {_show(parent)} became {_count(len(child), short=True)} "
        f"{_show(child)} when the text was sent back"
    )


def _count(n: int, *, short: bool = False) -> str:
    words = {1: "one", 2: "two", 3: "three", 4: "four"}
    word = words.get(n, str(n))
    return word if short else f"{word} token{'s' if n != 1 else ''}"


def _show(values: Sequence[Any]) -> str:
    return "[" + ", ".join(repr(v) for v in values) + "]"


def _join(parts: Sequence[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"
