"""A deterministic toy tokenizer with ChatML special tokens.

The split rule is chosen so that a newline and a special token are *always* token
boundaries: no piece can span across "\\n" or into "<|im_...|>". That makes
``tokenize(a + b) == tokenize(a) + tokenize(b)`` whenever ``a`` ends with a newline or
``b`` starts with a special token, which is exactly what the prompt template relies on
so that turn N's prompt plus its generated tokens is a token prefix of turn N+1's
prompt when the client replays the assistant output verbatim. Anything else that
changes (a re-serialised tool call, a reordered JSON key, an extra space) changes the
tokens from that point on, like a real BPE tokenizer would.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (IM_START, IM_END)

# Small fixed ids for the special tokens; ordinary pieces hash above this range so
# they can never collide with them.
_SPECIAL_IDS = {IM_START: 1, IM_END: 2}
_FIRST_ORDINARY_ID = 16
_ORDINARY_ID_SPAN = 2**31 - _FIRST_ORDINARY_ID

_PIECE = re.compile(
    "|".join(re.escape(tok) for tok in SPECIAL_TOKENS)
    # A lone newline, never merged with neighbours (see the module docstring).
    + r"|\n"
    # Runs of other whitespace.
    + r"|[^\S\n]+"
    # Words (Unicode-aware).
    + r"|\w+"
    # Any other single character (punctuation, symbols).
    + r"|[^\w\s]"
)


def split(text: str) -> list[str]:
    """Split text into token pieces; joining the pieces gives the text back exactly."""
    return _PIECE.findall(text)


# Every piece an id was made for, so ids can be decoded again (ids are hashes). A dict
# write is atomic, so the server thread and tests may both fill it.
_PIECES: dict[int, str] = {token: piece for piece, token in _SPECIAL_IDS.items()}


def piece_id(piece: str) -> int:
    """The stable id of one piece: the same in every process and on every replica."""
    special = _SPECIAL_IDS.get(piece)
    if special is not None:
        return special
    digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
    token = _FIRST_ORDINARY_ID + int.from_bytes(digest, "big") % _ORDINARY_ID_SPAN
    _PIECES[token] = piece
    return token


def piece_of(token: int) -> str:
    """The piece an id was made for; U+FFFD for an id never seen (as a byte-level
    tokenizer shows bytes that are not whole characters)."""
    return _PIECES.get(token, "\ufffd")


def merge_newline_pairs(pieces: Sequence[str]) -> list[str]:
    """Pieces with each run of two newlines as one piece (its own id), as a BPE model
    that learned "\n\n" generates it."""
    merged: list[str] = []
    for piece in pieces:
        if piece == "\n" and merged and merged[-1] == "\n":
            merged[-1] = "\n\n"
        else:
            merged.append(piece)
    return merged


def ids(pieces: Sequence[str]) -> list[int]:
    return [piece_id(p) for p in pieces]


def tokenize(text: str) -> list[int]:
    return ids(split(text))


def count(text: str) -> int:
    return len(split(text))


def detokenize(pieces: Sequence[str]) -> str:
    return "".join(pieces)
