"""The reuse account of one continuation: how much of its parent's tokens it could have
reused, how much vLLM should have served from its prefix cache, how much it did, and
why any tokens were lost.

Token-level facts only (no I/O): the parent's exact prompt and output ids, this turn's
exact prompt ids, the measured ``cached_tokens``, the block size, and what the pipeline
knows about the turn (fingerprint changes, an edited history). vLLM caches full blocks
of computed tokens: the parent's last output token was never fed back (no KV), and a
prompt's last token is always recomputed, so

    expected = block * floor(min(common prefix, |parent| - 1, |prompt| - 1) / block)

and 0 when the cache is isolated (another salt epoch or model). Every parent token
that was not served from the cache is lost to one cause: tokens after the first
divergence to re-tokenization, the template, a fingerprint change or an edited
history; agreeing tokens in the cut block to ``partial_block``; expected tokens the
engine did not have to ``not_resident``.

The losses are what *the parent* could have given this prompt and did not: they depend
on the parent's tokens, this prompt and the parent's blocks vLLM still held, never on
what another request happened to leave in the cache. Blocks stored by a sibling (or any
other request) that reach past the divergence are served all the same; they are counted
apart, as ``extra_cached`` (measured beyond expected), and take nothing off the losses.
So the losses always add up to ``|parent| - min(measured, expected)``: two continuations
with the same parent and the same split lose the same tokens, whatever a sibling left.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# 2: losses are the parent's alone (version 1 took what other requests' blocks served
# off them).
ACCOUNT_VERSION = 2
# A UTF-8 character has at most 4 bytes; byte tokens of an unfinished one, at most 3.
MAX_PARTIAL_CHARACTER_TOKENS = 3


class Cause(StrEnum):
    RETOKENIZATION = "retokenization"
    TEMPLATE = "template"
    FINGERPRINT = "fingerprint"
    HISTORY_EDITED = "history_edited"
    # The parent compacted its context by threshold: its answer was made on the compacted
    # window, which this prompt does not extend (it replays the parent's input no more).
    CONTEXT_COMPACTED = "context_compacted"
    NOT_RESIDENT = "not_resident"
    PARTIAL_BLOCK = "partial_block"
    COLD_START = "cold_start"


class Status(StrEnum):
    # The parent's prompt and output are a token prefix of this prompt.
    EXACT = "exact"
    DIVERGED = "diverged"
    # No parent: nothing of its own to reuse.
    COLD_START = "cold_start"
    # Token data missing or unusable: the account cannot be made (``reason`` says why).
    UNKNOWN = "unknown"


# Fingerprint components that isolate the prefix cache outright (vLLM salts the cache by
# ``cache_salt``; another model has other KV altogether).
ISOLATING = frozenset({"model", "salt_epoch"})
# Which cause names the loss when several components explain one divergence.
_PRECEDENCE = (
    Cause.FINGERPRINT,
    Cause.HISTORY_EDITED,
    Cause.CONTEXT_COMPACTED,
    Cause.TEMPLATE,
    Cause.RETOKENIZATION,
    Cause.NOT_RESIDENT,
    Cause.PARTIAL_BLOCK,
)


@dataclass(frozen=True)
class Divergence:
    """Where this prompt first parts from the parent's prompt + output."""

    offset: int
    # "prompt": inside the parent's own prompt; "output": inside what it generated.
    region: str
    parent_tokens: tuple[int, ...]
    child_tokens: tuple[int, ...]
    # All of the parent's tokens reappear after local re-splits.
    realigned: bool
    splits: int
    # Parent tokens from the divergence to the parent's end.
    remainder: int
    # Decoded token by token when the upstream could detokenize (filled after commit).
    parent_pieces: tuple[str, ...] | None = None
    child_pieces: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "region": self.region,
            "parent_tokens": list(self.parent_tokens),
            "child_tokens": list(self.child_tokens),
            "realigned": self.realigned,
            "splits": self.splits,
            "remainder": self.remainder,
            "parent_pieces": None if self.parent_pieces is None else list(self.parent_pieces),
            "child_pieces": None if self.child_pieces is None else list(self.child_pieces),
        }


@dataclass(frozen=True)
class CacheWrite:
    """The prompt tokens the engine says it wrote to its prefix cache, against ours: the
    prompt's full blocks it did not have cached. They differ when the engine's blocks
    are not the ones we count (another block size, a hybrid or sliding-window model, a
    cache too small to keep the whole prompt)."""

    engine: int
    expected: int

    @property
    def agrees(self) -> bool:
        return self.engine == self.expected

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "expected": self.expected, "agrees": self.agrees}


def cache_write(
    engine: int | None, prompt_tokens: int, cached: int | None, block_size: int | None
) -> CacheWrite | None:
    """The comparison, when the engine reported its count and ours can be made."""
    if engine is None or cached is None or block_size is None:
        return None
    return CacheWrite(engine, max(block_floor(prompt_tokens, block_size) - cached, 0))


@dataclass(frozen=True)
class TokenAccount:
    status: Status
    parent_id: str | None
    block_size: int | None
    parent_tokens: int | None = None
    prompt_tokens: int | None = None
    reusable_tokens: int | None = None
    expected_cached: int | None = None
    measured_cached: int | None = None
    ideal_cached: int | None = None
    cause: Cause | None = None
    lost: dict[Cause, int] = field(default_factory=dict)
    extra_cached: int = 0
    divergence: Divergence | None = None
    changes: tuple[str, ...] = ()
    # Why the account is unknown (status UNKNOWN), in words.
    reason: str | None = None
    # What the parent generated, for naming what a template dropped.
    parent_output_types: tuple[str, ...] = ()
    # The engine's cache writes against ours (None: the engine reports none).
    cache_write: CacheWrite | None = None

    @property
    def token_exact(self) -> bool:
        return self.status is Status.EXACT

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": ACCOUNT_VERSION,
            "status": self.status.value,
            "parent_id": self.parent_id,
            "block_size": self.block_size,
            "token_exact": self.token_exact,
            "parent_tokens": self.parent_tokens,
            "prompt_tokens": self.prompt_tokens,
            "reusable_tokens": self.reusable_tokens,
            "expected_cached": self.expected_cached,
            "measured_cached": self.measured_cached,
            "ideal_cached": self.ideal_cached,
            "cause": None if self.cause is None else self.cause.value,
            "lost": {cause.value: tokens for cause, tokens in self.lost.items()},
            "extra_cached": self.extra_cached,
            "divergence": None if self.divergence is None else self.divergence.to_dict(),
            "changes": list(self.changes),
            "reason": self.reason,
            "parent_output_types": list(self.parent_output_types),
            "cache_write": None if self.cache_write is None else self.cache_write.to_dict(),
        }


def unknown(reason: str, *, parent_id: str | None, measured: int | None = None) -> TokenAccount:
    return TokenAccount(Status.UNKNOWN, parent_id, None, measured_cached=measured, reason=reason)


def cold_start(prompt_tokens: int, measured: int | None, block_size: int | None) -> TokenAccount:
    return TokenAccount(
        Status.COLD_START,
        None,
        block_size,
        parent_tokens=0,
        prompt_tokens=prompt_tokens,
        reusable_tokens=0,
        expected_cached=0,
        measured_cached=measured,
        ideal_cached=0,
        cause=Cause.COLD_START,
        extra_cached=measured or 0,
    )


def block_floor(tokens: int, block_size: int) -> int:
    return max(0, tokens) // block_size * block_size


@dataclass(frozen=True)
class Continuation:
    """What the pipeline knows about a continuation beyond its token ids."""

    parent_id: str
    # Components of the execution fingerprint that changed since the parent.
    changes: Sequence[str] = ()
    # The model-visible items are not an extension of the parent's.
    history_edited: bool = False
    # The parent's output holds a ``compaction`` item: it answered on a compacted window.
    context_compacted: bool = False
    parent_output_types: Sequence[str] = ()
    # The parent's generation was cut off (max_output_tokens): it may end inside a
    # character, whose bytes no text can carry back.
    parent_cut_off: bool = False


def account(
    continuation: Continuation,
    parent_prompt: array[int],
    parent_output: array[int],
    prompt: array[int],
    measured: int | None,
    block_size: int,
) -> TokenAccount:
    """The account of ``prompt`` continuing a parent whose exact tokens were
    ``parent_prompt + parent_output``."""
    if measured is None:
        return unknown(
            "the upstream did not report cached_tokens", parent_id=continuation.parent_id
        )
    parent = array("I", parent_prompt)
    parent.extend(parent_output)
    common = common_prefix(parent, prompt)
    exact = common == len(parent)
    isolated = sorted(ISOLATING.intersection(continuation.changes))
    reusable = min(common, len(parent) - 1, len(prompt) - 1)
    expected = 0 if isolated else block_floor(reusable, block_size)
    # What a token-exact replay of the parent would have been served; never below what
    # this prompt was served (a sibling's blocks may reach past the parent's own).
    ideal = max(block_floor(len(parent) - 1, block_size), measured)
    divergence = None if exact else _divergence(parent, prompt, common, len(parent_prompt))

    lost: dict[Cause, int] = {}
    if isolated:
        lost[Cause.FINGERPRINT] = len(parent)
    else:
        if not exact:
            assert divergence is not None
            lost[_divergence_cause(continuation, divergence)] = len(parent) - common
        if common - expected > 0:
            lost[Cause.PARTIAL_BLOCK] = common - expected
        if expected > measured:
            lost[Cause.NOT_RESIDENT] = expected - measured
    return TokenAccount(
        status=Status.EXACT if exact else Status.DIVERGED,
        parent_id=continuation.parent_id,
        block_size=block_size,
        parent_tokens=len(parent),
        prompt_tokens=len(prompt),
        reusable_tokens=common,
        expected_cached=expected,
        measured_cached=measured,
        ideal_cached=ideal,
        cause=_main_cause(lost),
        lost=lost,
        extra_cached=max(0, measured - expected),
        divergence=divergence,
        changes=tuple(continuation.changes),
        parent_output_types=tuple(continuation.parent_output_types),
    )


def _divergence(
    parent: array[int], prompt: array[int], offset: int, parent_prompt_len: int
) -> Divergence:
    alignment = align(parent, prompt, offset)
    first = alignment.splits[0] if alignment.splits else None
    return Divergence(
        offset=offset,
        region="prompt" if offset < parent_prompt_len else "output",
        parent_tokens=first.parent if first else tuple(parent[offset : offset + 8]),
        child_tokens=first.child if first else tuple(prompt[offset : offset + 8]),
        realigned=alignment.realigned,
        splits=len(alignment.splits),
        remainder=len(parent) - offset,
    )


# Fingerprint components that change what is rendered anywhere in the prompt, not only
# before the history.
_ANYWHERE = frozenset({"tokenizer", "reasoning_context"})


def _divergence_cause(continuation: Continuation, divergence: Divergence) -> Cause:
    changes = set(continuation.changes)
    # A changed fingerprint explains a divergence where its components render: tools and
    # instructions before the history (in the parent's prompt); another tokenizer anywhere.
    # A changed tool_choice, say, renders nothing and explains nothing in the output.
    # Another reasoning context leaves out or restores reasoning items wherever they are,
    # the parent's own output included.
    if changes & _ANYWHERE or (changes and divergence.region == "prompt"):
        return Cause.FINGERPRINT
    if continuation.history_edited:
        return Cause.HISTORY_EDITED
    if continuation.context_compacted:
        return Cause.CONTEXT_COMPACTED
    if divergence.region == "output" and divergence.realigned:
        return Cause.RETOKENIZATION
    if (
        divergence.region == "output"
        and continuation.parent_cut_off
        and divergence.remainder <= MAX_PARTIAL_CHARACTER_TOKENS
    ):
        # The last few byte tokens of a cut-off answer: a partial UTF-8 character, which
        # the text sent back cannot hold (it decodes to U+FFFD or nothing).
        return Cause.RETOKENIZATION
    return Cause.TEMPLATE


def _main_cause(lost: dict[Cause, int]) -> Cause | None:
    """The cause that lost the most tokens; a partial block only when nothing else did."""
    real: dict[Cause, int] = {
        cause: n for cause, n in lost.items() if n > 0 and cause is not Cause.PARTIAL_BLOCK
    }
    if real:
        top = max(real.values())
        return next(cause for cause in _PRECEDENCE if real.get(cause) == top)
    return Cause.PARTIAL_BLOCK if lost.get(Cause.PARTIAL_BLOCK) else None


def with_pieces(
    account_dict: dict[str, Any], parent_pieces: Sequence[str], child_pieces: Sequence[str]
) -> dict[str, Any]:
    """The stored account with its divergence's tokens decoded."""
    divergence = dict(account_dict.get("divergence") or {})
    if not divergence:
        return account_dict
    divergence["parent_pieces"] = list(parent_pieces)
    divergence["child_pieces"] = list(child_pieces)
    return {**account_dict, "divergence": divergence}


# Where two token sequences part, and whether they meet again.

# A continuation's prompt should begin with its parent's prompt and output, token for
# token. When it does not, the shape of the difference says why: a re-tokenized text
# splits a few tokens differently and then agrees again (the parent's tokens all
# reappear, shifted), while a template that drops or rewrites content leaves parent
# tokens that never reappear.


# How far (in tokens, on each side) a re-split may reach before we call it a rewrite,
# and how many tokens must agree again to count as meeting again.
RESYNC_WINDOW = 8

RESYNC_RUN = 4

# Divergences followed before giving up on the rest of the parent.
MAX_SPLITS = 64


def common_prefix(a: array[int], b: array[int]) -> int:
    """Length of the longest common prefix, by binary search over byte slices (each
    comparison a memcmp), so long prompts cost microseconds, not a Python loop."""
    left, right = 0, min(len(a), len(b))
    raw_a, raw_b = a.tobytes(), b.tobytes()
    size = a.itemsize
    if raw_a[: right * size] == raw_b[: right * size]:
        return right
    # Invariant: the first ``left`` agree, the first ``right`` do not.
    while right - left > 1:
        middle = (left + right) // 2
        if raw_a[: middle * size] == raw_b[: middle * size]:
            left = middle
        else:
            right = middle
    return left


@dataclass(frozen=True)
class Split:
    """One place where the child's tokens differ from the parent's: ``parent`` tokens
    (from ``offset`` in the parent) became ``child`` tokens (from ``child_offset``)."""

    offset: int
    child_offset: int
    parent: tuple[int, ...]
    child: tuple[int, ...]
    # The sequences agreed again right after (False: they did not within the window).
    resynced: bool


@dataclass(frozen=True)
class Alignment:
    """How the child covers the parent from the first divergence on."""

    splits: tuple[Split, ...]
    # Every parent token reappears in the child, in order, apart from local re-splits
    # that replaced at least one token by at least one other.
    realigned: bool


def align(parent: array[int], child: array[int], start: int) -> Alignment:
    """Follows ``parent`` through ``child`` from the divergence at ``start``."""
    splits: list[Split] = []
    p, c = start, start
    while p < len(parent) and len(splits) < MAX_SPLITS:
        found = _resync(parent, child, p, c)
        if found is None:
            splits.append(
                Split(
                    p,
                    c,
                    tuple(parent[p : p + RESYNC_WINDOW]),
                    tuple(child[c : c + RESYNC_WINDOW]),
                    resynced=False,
                )
            )
            return Alignment(tuple(splits), realigned=False)
        skip_p, skip_c = found
        splits.append(
            Split(p, c, tuple(parent[p : p + skip_p]), tuple(child[c : c + skip_c]), True)
        )
        if skip_p == 0 or skip_c == 0:
            # Tokens only dropped or only inserted: content, not a different split of it.
            return Alignment(tuple(splits), realigned=False)
        p, c = p + skip_p, c + skip_c
        agreed = common_prefix(parent[p:], child[c:])
        p, c = p + agreed, c + agreed
    return Alignment(tuple(splits), realigned=p >= len(parent))


def _resync(parent: array[int], child: array[int], p: int, c: int) -> tuple[int, int] | None:
    """The smallest (by total) skips after which ``parent[p:]`` and ``child[c:]`` agree
    for ``RESYNC_RUN`` tokens (or up to the parent's end), or None."""
    best: tuple[int, int] | None = None
    for total in range(1, 2 * RESYNC_WINDOW + 1):
        for skip_p in range(max(0, total - RESYNC_WINDOW), min(total, RESYNC_WINDOW) + 1):
            skip_c = total - skip_p
            run = min(RESYNC_RUN, len(parent) - (p + skip_p))
            if run <= 0:
                continue
            if parent[p + skip_p : p + skip_p + run] == child[c + skip_c : c + skip_c + run]:
                best = (skip_p, skip_c)
                break
        if best is not None:
            return best
    return None
