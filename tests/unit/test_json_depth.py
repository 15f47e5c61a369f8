"""json_depth agrees with the plain recursive definition on any JSON value, through its
shortcut for shallow values and its general walk alike."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentic_api.wire.storable import json_depth

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=30,
)


def reference_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((reference_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((reference_depth(v) for v in value), default=0)
    return 0


@given(values)
def test_depth_matches_the_recursive_definition(value: Any) -> None:
    assert json_depth(value) == reference_depth(value)


def test_a_deep_value_is_measured_without_recursion() -> None:
    value: Any = []
    for _ in range(100_000):
        value = [value]
    assert json_depth({"delta": "x", "logprobs": value}) == 100_002
