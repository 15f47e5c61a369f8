"""Prefixed, time-ordered, unguessable identifiers.

An id is ``<prefix>_<48 hex>``: 12 hex digits of unix milliseconds, then 36
hex digits (144 bits) of a counter that starts at a random value each
millisecond and steps forward by a random amount for every further id in
that millisecond. Within one process, plain string order is therefore mint
order, even for ids minted in the same millisecond or after the wall clock
steps back, while the random start and steps keep neighbours unguessable.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from enum import StrEnum

__all__ = [
    "ID_HEX_LENGTH",
    "IdKind",
    "IdMinter",
    "id_kind",
    "id_timestamp_ms",
    "is_valid_id",
    "mint_id",
]


class IdKind(StrEnum):
    RESPONSE = "resp"
    CONVERSATION = "conv"
    MESSAGE = "msg"
    FUNCTION_CALL = "fc"
    FUNCTION_CALL_OUTPUT = "fco"
    REASONING = "rs"
    ITEM = "item"
    MCP_CALL = "mcp"
    MCP_LIST_TOOLS = "mcpl"
    MCP_APPROVAL = "mcpr"
    COMPACTION = "cmp"
    TENANT = "ten"
    API_KEY = "key"
    ADMIN_KEY = "adm"
    CALL = "call"
    JOB = "job"
    # A recorded turn of the Anthropic Messages API (AGENTIC_MESSAGES_RECORD_TURNS).
    MESSAGE_TURN = "mturn"
    # The hosted multi-agent beta's items (what one agent asked of the tree, its result,
    # a message between two agents).
    MULTI_AGENT_CALL = "mac"
    MULTI_AGENT_OUTPUT = "maco"
    AGENT_MESSAGE = "amsg"


_TIME_HEX = 12
_TAIL_HEX = 36
ID_HEX_LENGTH = _TIME_HEX + _TAIL_HEX

_TIME_LIMIT = 1 << (4 * _TIME_HEX)
_TAIL_BITS = 4 * _TAIL_HEX
_TAIL_LIMIT = 1 << _TAIL_BITS
# A fresh tail keeps its top bit clear, leaving 2**143 of headroom for steps
# of at most 2**64: more ids than one millisecond can ever produce.
_FRESH_TAIL_BITS = _TAIL_BITS - 1
_STEP_BITS = 64

_HEX_DIGITS = frozenset("0123456789abcdef")
_KINDS_BY_PREFIX = {kind.value: kind for kind in IdKind}


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class _BufferedRandom:
    """Random bits from the OS's CSPRNG, read 4 KiB at a time.

    ``secrets.randbits`` makes one ``getrandom`` system call per id, and a turn mints
    several; under load that was ~2.5% of the server's CPU. The bytes are the same
    quality, only fetched in bulk. A forked child drops what it inherited, so parent and
    child never hand out the same bits."""

    _CHUNK = 4096

    def __init__(self) -> None:
        self._buffer = b""
        self._offset = 0
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def randbits(self, bits: int) -> int:
        size = (bits + 7) // 8
        with self._lock:
            if self._offset + size > len(self._buffer):
                self._buffer = os.urandom(max(self._CHUNK, size))
                self._offset = 0
            chunk = self._buffer[self._offset : self._offset + size]
            self._offset += size
        return int.from_bytes(chunk, "big") >> (size * 8 - bits)

    def _forget(self) -> None:
        self._buffer = b""
        self._offset = 0
        self._lock = threading.Lock()


_RANDOM = _BufferedRandom()


class IdMinter:
    """Mints ids that sort in mint order; one per process is the norm.

    The clock and random source are injectable so that clock steps and
    counter overflow can be tested; production code uses ``mint_id``.
    """

    def __init__(
        self,
        *,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        randbits: Callable[[int], int] = _RANDOM.randbits,
    ) -> None:
        self._clock_ms = clock_ms
        self._randbits = randbits
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_tail = 0

    def mint(self, kind: IdKind) -> str:
        with self._lock:
            ms, tail = self._next()
            self._last_ms, self._last_tail = ms, tail
        return f"{kind.value}_{ms:0{_TIME_HEX}x}{tail:0{_TAIL_HEX}x}"

    def _next(self) -> tuple[int, int]:
        now = self._checked(self._clock_ms())
        if now > self._last_ms:
            return now, self._randbits(_FRESH_TAIL_BITS)
        # Same millisecond, or the clock stepped back: stay on the last
        # timestamp so the new id still sorts after the previous one.
        tail = self._last_tail + 1 + self._randbits(_STEP_BITS)
        if tail < _TAIL_LIMIT:
            return self._last_ms, tail
        return self._checked(self._last_ms + 1), self._randbits(_FRESH_TAIL_BITS)

    @staticmethod
    def _checked(ms: int) -> int:
        if not 0 <= ms < _TIME_LIMIT:
            raise OverflowError(f"timestamp {ms} ms does not fit in an id")
        return ms


_DEFAULT_MINTER = IdMinter()


def mint_id(kind: IdKind) -> str:
    return _DEFAULT_MINTER.mint(kind)


def id_kind(value: str) -> IdKind | None:
    """The kind named by ``value``'s prefix; the rest of ``value`` is not checked."""
    prefix, separator, _ = value.partition("_")
    if not separator:
        return None
    return _KINDS_BY_PREFIX.get(prefix)


def is_valid_id(value: str, kind: IdKind | None = None) -> bool:
    """Whether ``value`` has the exact shape ``mint_id`` produces (of ``kind``, if given)."""
    found = id_kind(value)
    if found is None or (kind is not None and found is not kind):
        return False
    body = value.partition("_")[2]
    return len(body) == ID_HEX_LENGTH and _HEX_DIGITS.issuperset(body)


def id_timestamp_ms(value: str) -> int:
    """The unix time in milliseconds at which ``value`` was minted."""
    if not is_valid_id(value):
        raise ValueError(f"not a well-formed id: {value!r}")
    return int(value.partition("_")[2][:_TIME_HEX], 16)
