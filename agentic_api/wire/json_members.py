"""A JSON object's top-level members with where each one lies in the text, so a body can
be changed member by member while every other byte stays as the client sent it.

Forwarding a client's request upstream by parsing and re-serializing it would rewrite
what the client chose: number spellings, string escapes, key order, whitespace. The
model server would mostly see the same tokens, but "mostly" is what loses a prefix
cache. Editing the text keeps everything we do not own byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# Python's parser accepts NaN and Infinity, which are not JSON: refuse them, as the
# model server's parser would.
_DECODER = json.JSONDecoder(parse_constant=_no_constants)


class NotAJsonObject(ValueError):
    """The text is not one JSON object (``str(exc)`` says where it went wrong)."""


@dataclass(frozen=True)
class Member:
    key: str
    value: Any
    # Character offsets in the text: the key's opening quote, and just past the value.
    start: int
    end: int


@dataclass(frozen=True)
class JsonObjectText:
    text: str
    members: tuple[Member, ...]

    def values(self) -> dict[str, Any]:
        """The object as a parser would give it (a repeated key: the last one wins)."""
        return {member.key: member.value for member in self.members}

    def edited(self, *, drop: Iterable[str] = (), append: Mapping[str, Any] | None = None) -> str:
        """The text without the members named in ``drop`` (every occurrence) and with
        ``append``'s members added after the last one; every other byte is kept."""
        dropped = set(drop)
        if not dropped and not append:
            return self.text
        members = self.members
        kept = [i for i, member in enumerate(members) if member.key not in dropped]
        if members:
            parts = [self.text[: members[0].start]]
            for count, index in enumerate(kept):
                if count:
                    # The separator that preceded this member in the original.
                    parts.append(self.text[members[index - 1].end : members[index].start])
                parts.append(self.text[members[index].start : members[index].end])
            tail = self.text[members[-1].end :]
        else:
            brace = self.text.index("{") + 1
            parts, tail = [self.text[:brace]], self.text[brace:]
        separate = bool(kept)
        for key, value in (append or {}).items():
            if separate:
                parts.append(",")
            parts.append(json.dumps(key) + ":" + json.dumps(value, ensure_ascii=False))
            separate = True
        parts.append(tail)
        return "".join(parts)


def parse_object(text: str) -> JsonObjectText:
    """Parses ``text`` as one JSON object, keeping its members' offsets."""
    position = _skip(text, 0)
    if not text.startswith("{", position):
        raise NotAJsonObject("the body must be a JSON object")
    position = _skip(text, position + 1)
    members: list[Member] = []
    if text.startswith("}", position):
        return _finished(text, position + 1, members)
    while True:
        if not text.startswith('"', position):
            raise NotAJsonObject(f"expected a member name at character {position}")
        start = position
        try:
            key, position = json.decoder.scanstring(text, position + 1)  # type: ignore[attr-defined]
        except json.JSONDecodeError as exc:
            raise NotAJsonObject(f"invalid member name at character {start}: {exc.msg}") from None
        position = _skip(text, position)
        if not text.startswith(":", position):
            raise NotAJsonObject(f"expected ':' at character {position}")
        position = _skip(text, position + 1)
        try:
            value, end = _DECODER.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise NotAJsonObject(f"invalid value for {key!r}: {exc.msg} at {exc.pos}") from None
        except (ValueError, RecursionError) as exc:
            raise NotAJsonObject(f"invalid value for {key!r}: {exc}") from None
        members.append(Member(key, value, start, end))
        position = _skip(text, end)
        if text.startswith(",", position):
            position = _skip(text, position + 1)
            continue
        if text.startswith("}", position):
            return _finished(text, position + 1, members)
        raise NotAJsonObject(f"expected ',' or '}}' at character {position}")


def _finished(text: str, position: int, members: list[Member]) -> JsonObjectText:
    if _skip(text, position) != len(text):
        raise NotAJsonObject(f"unexpected data after the object at character {position}")
    return JsonObjectText(text, tuple(members))


def _skip(text: str, position: int) -> int:
    match = _WHITESPACE.match(text, position)
    return position if match is None else match.end()
