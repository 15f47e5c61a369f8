from __future__ import annotations

import hashlib
from functools import reduce

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lineage.digest import (
    DIGEST_HEX_LENGTH,
    common_prefix_length,
    digest_chain,
    digest_extend,
    digest_root,
    extend_digest,
    is_valid_digest,
    prefix_digest,
)

# A tiny alphabet makes equal and near-equal item lists common, which is
# where an ambiguous encoding would show.
items = st.binary(max_size=3).map(lambda b: bytes(x % 3 for x in b))
item_lists = st.lists(items, max_size=5)
names = st.text(max_size=4)


def _framed(*fields: bytes) -> bytes:
    return b"".join(len(f).to_bytes(8, "big") + f for f in fields)


def test_layout_is_the_documented_one() -> None:
    # Pins the stored format: changing it would orphan every stored digest.
    root = hashlib.sha256(_framed(b"agentic-api/prefix-digest/v1/root", b"m", b"s")).hexdigest()
    link = hashlib.sha256(
        _framed(b"agentic-api/prefix-digest/v1/item", bytes.fromhex(root), b'{"a":1}')
    ).hexdigest()
    assert digest_root("m", "s") == root
    assert prefix_digest("m", "s", [b'{"a":1}']) == link
    assert prefix_digest("m", "s", [b'{"a":1}', b"[]"]) == (
        "adb421cf8404d7b17fc63edcdd6a0ad759456661ac8f56b7cfedab24170848f8"
    )


def test_fields_are_length_prefixed() -> None:
    assert digest_root("ab", "c") != digest_root("a", "bc")
    assert digest_root("", "ab") != digest_root("ab", "")
    assert prefix_digest("m", "s", [b"ab"]) != prefix_digest("m", "s", [b"a", b"b"])
    assert prefix_digest("m", "s", [b""]) != prefix_digest("m", "s", [])


def test_empty_prefix_is_the_root() -> None:
    assert prefix_digest("m", "s", []) == digest_root("m", "s")
    assert digest_chain("m", "s", []) == []


def test_accepts_any_iterable() -> None:
    listed = prefix_digest("m", "s", [b"a", b"b"])
    assert prefix_digest("m", "s", iter([b"a", b"b"])) == listed
    assert digest_chain("m", "s", (x for x in [b"a", b"b"]))[-1] == listed


@pytest.mark.parametrize("bad", ["", "ab", "A" * 64, "g" * 64, "0" * 63, "0" * 65, " " + "0" * 63])
def test_extend_rejects_a_non_digest(bad: str) -> None:
    assert not is_valid_digest(bad)
    with pytest.raises(ValueError, match="not a prefix digest"):
        digest_extend(bad, b"x")


def test_common_prefix_length_edges() -> None:
    assert common_prefix_length([], []) == 0
    assert common_prefix_length(["a"], []) == 0
    assert common_prefix_length(["a", "b"], ["a", "b", "c"]) == 2
    assert common_prefix_length(["a", "b"], ["a", "x"]) == 1
    assert common_prefix_length(["x"], ["a"]) == 0


@given(names, names, item_lists)
def test_output_is_hex_sha256(model: str, salt: str, xs: list[bytes]) -> None:
    digest = prefix_digest(model, salt, xs)
    assert len(digest) == DIGEST_HEX_LENGTH
    assert is_valid_digest(digest)


@given(names, names, item_lists, item_lists)
def test_equal_exactly_when_byte_identical(
    model: str, salt: str, xs: list[bytes], ys: list[bytes]
) -> None:
    same = prefix_digest(model, salt, xs) == prefix_digest(model, salt, ys)
    assert same == (xs == ys)


@given(names, names, names, names, item_lists)
def test_model_and_salt_are_bound(
    model_a: str, salt_a: str, model_b: str, salt_b: str, xs: list[bytes]
) -> None:
    same = prefix_digest(model_a, salt_a, xs) == prefix_digest(model_b, salt_b, xs)
    assert same == ((model_a, salt_a) == (model_b, salt_b))


@given(names, names, item_lists, item_lists, item_lists)
def test_forks_share_the_chain_up_to_divergence(
    model: str, salt: str, trunk: list[bytes], branch_a: list[bytes], branch_b: list[bytes]
) -> None:
    a, b = trunk + branch_a, trunk + branch_b
    diverge = 0
    while diverge < min(len(a), len(b)) and a[diverge] == b[diverge]:
        diverge += 1
    chain_a, chain_b = digest_chain(model, salt, a), digest_chain(model, salt, b)
    assert common_prefix_length(chain_a, chain_b) == diverge
    assert chain_a[:diverge] == chain_b[:diverge]
    assert len(set(chain_a[diverge:]) & set(chain_b[diverge:])) == 0


@given(names, names, item_lists, item_lists)
def test_extending_a_prefix_digest_equals_digesting_the_longer_list(
    model: str, salt: str, xs: list[bytes], more: list[bytes]
) -> None:
    extended = reduce(digest_extend, more, prefix_digest(model, salt, xs))
    assert extended == prefix_digest(model, salt, xs + more)


@given(names, names, item_lists)
def test_chain_entries_are_the_prefix_digests(model: str, salt: str, xs: list[bytes]) -> None:
    chain = digest_chain(model, salt, xs)
    assert chain == [prefix_digest(model, salt, xs[: i + 1]) for i in range(len(xs))]


@given(st.lists(st.binary(max_size=64), max_size=8), st.lists(st.binary(max_size=64), max_size=8))
def test_extend_digest_continues_a_prefix(head: list[bytes], tail: list[bytes]) -> None:
    start = prefix_digest("m", "salt", head)
    assert extend_digest(start, tail) == prefix_digest("m", "salt", [*head, *tail])


def test_extend_digest_rejects_a_non_digest() -> None:
    with pytest.raises(ValueError):
        extend_digest("not-a-digest", [b"x"])
