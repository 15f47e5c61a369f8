"""Editing a JSON object's top-level members in its text: what is not edited keeps its
bytes, and the result parses as the edited object."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentic_api.wire.json_members import NotAJsonObject, parse_object

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
objects = st.dictionaries(st.sampled_from(["a", "b", "cache_salt", "é", "x y"]), values, max_size=5)
spacing = st.sampled_from(["", " ", "\n  ", "\t"])


def spaced(value: dict[str, Any], gap: str) -> str:
    members = [f"{gap}{json.dumps(k)}{gap}:{gap}{json.dumps(v)}{gap}" for k, v in value.items()]
    return "{" + ",".join(members) + gap + "}"


@given(objects, spacing)
def test_an_unedited_object_is_its_text(value: dict[str, Any], gap: str) -> None:
    text = spaced(value, gap)
    parsed = parse_object(text)
    assert parsed.values() == value
    assert parsed.edited() == text


@given(objects, spacing)
def test_dropping_and_appending_keeps_every_other_member_verbatim(
    value: dict[str, Any], gap: str
) -> None:
    text = spaced(value, gap)
    edited = parse_object(text).edited(drop=["cache_salt"], append={"cache_salt": "s"})
    expected = {k: v for k, v in value.items() if k != "cache_salt"} | {"cache_salt": "s"}
    assert json.loads(edited) == expected
    for key, member in value.items():
        if key != "cache_salt":
            assert f"{json.dumps(key)}{gap}:{gap}{json.dumps(member)}" in edited


def test_a_repeated_key_is_dropped_everywhere() -> None:
    text = '{"cache_salt": "a", "m": 1, "cache_salt": "b"}'
    parsed = parse_object(text)
    assert parsed.values()["cache_salt"] == "b"
    assert parsed.edited(drop=["cache_salt"]) == '{"m": 1}'


def test_spellings_the_parser_would_normalize_are_kept() -> None:
    text = '{"t": 1.0e0, "s": "\\u00e9\\/", "n": -0}'
    assert parse_object(text).edited(append={"k": "v"}) == text[:-1] + ',"k":"v"}'


@pytest.mark.parametrize(
    "text", ["", "[]", "1", "{", '{"a"}', '{"a":1,}', '{"a":1} x', '{"a": NaN}', "{'a': 1}"]
)
def test_anything_but_one_object_is_refused(text: str) -> None:
    with pytest.raises(NotAJsonObject):
        parse_object(text)
