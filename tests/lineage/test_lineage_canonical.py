from __future__ import annotations

import hashlib
import json
import math
import random
from collections import OrderedDict
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lineage.canonical import canonical_json, sha256_hex

# Text excludes surrogates by default, matching what UTF-8 can carry.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


def test_exact_bytes() -> None:
    value = {"b": 1, "a": [1, 2.5, "é", None, True, False], "c": {"y": {}, "x": []}}
    expected = '{"a":[1,2.5,"é",null,true,false],"b":1,"c":{"x":[],"y":{}}}'
    assert canonical_json(value) == expected.encode("utf-8")


def test_non_ascii_is_raw_utf8_not_escaped() -> None:
    assert canonical_json("日本\n") == '"日本\\n"'.encode()


def test_tuples_encode_as_arrays() -> None:
    assert canonical_json((1, (2,))) == b"[1,[2]]"


def test_keys_sort_by_code_point() -> None:
    assert canonical_json({"é": 0, "z": 0, "Z": 0, "": 0}) == '{"":0,"Z":0,"z":0,"é":0}'.encode()


def test_scalar_subclasses_encode_as_their_values() -> None:
    class Color(StrEnum):
        RED = "red"

    class Level(IntEnum):
        HIGH = 3

    value = OrderedDict([("z", Color.RED), ("a", Level.HIGH)])
    assert canonical_json(value) == b'{"a":3,"z":"red"}'


def test_a_shared_but_acyclic_reference_is_fine() -> None:
    shared = [1]
    assert canonical_json({"a": shared, "b": [shared, shared]}) == b'{"a":[1],"b":[[1],[1]]}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_rejects_non_finite_floats_anywhere(bad: float) -> None:
    for value in (bad, [1, bad], {"a": {"b": bad}}):
        with pytest.raises(ValueError, match="not valid JSON"):
            canonical_json(value)


@pytest.mark.parametrize("key", [1, 1.5, None, True, ("a",)])
def test_rejects_non_string_keys(key: object) -> None:
    with pytest.raises(ValueError, match="keys must be strings"):
        canonical_json({"nested": {key: 1}})


@pytest.mark.parametrize("bad", [{1, 2}, b"bytes", object(), Decimal("1.5"), frozenset()])
def test_rejects_non_json_types(bad: object) -> None:
    with pytest.raises(TypeError, match="is not a JSON value"):
        canonical_json({"a": [bad]})


def test_rejects_cycles() -> None:
    as_list: list[object] = []
    as_list.append(as_list)
    as_dict: dict[str, object] = {}
    as_dict["self"] = [as_dict]
    for value in (as_list, as_dict):
        with pytest.raises(ValueError, match="circular"):
            canonical_json(value)


def test_rejects_lone_surrogates() -> None:
    with pytest.raises(ValueError, match="lone surrogate"):
        canonical_json({"a": "\ud800"})


def test_sha256_hex_matches_hashlib() -> None:
    assert sha256_hex(b"abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


@given(json_values)
def test_round_trips_through_json(value: Any) -> None:
    assert json.loads(canonical_json(value)) == value


@given(json_values)
def test_is_a_fixed_point(value: Any) -> None:
    encoded = canonical_json(value)
    assert canonical_json(json.loads(encoded)) == encoded


@given(st.dictionaries(st.text(max_size=4), json_values, max_size=8), st.randoms())
def test_key_insertion_order_does_not_matter(value: dict[str, Any], rng: random.Random) -> None:
    keys = list(value)
    rng.shuffle(keys)
    reordered = {key: value[key] for key in keys}
    assert canonical_json(reordered) == canonical_json(value)


@given(json_values)
def test_is_compact(value: Any) -> None:
    # No whitespace outside strings: re-encoding the parsed value with the
    # same settings json itself would use must give the same bytes.
    expected = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")
    assert canonical_json(value) == expected
    assert hashlib.sha256(expected).hexdigest() == sha256_hex(canonical_json(value))
