from __future__ import annotations

import dataclasses
import json
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lineage.canonical import canonical_json, sha256_hex
from lineage.fingerprint import ExecutionFingerprint, FingerprintChange

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
SEARCH = {"type": "function", "name": "search", "parameters": {"type": "object"}}
MCP = {"type": "mcp", "server_label": "deepwiki", "server_url": "https://x"}
WEB = {"type": "web_search"}


def build(**overrides: Any) -> ExecutionFingerprint:
    arguments: dict[str, Any] = {
        "model": "qwen3",
        "instructions": "be brief",
        "tools": [WEATHER, SEARCH],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}},
        "reasoning": {"effort": "low"},
        "truncation": "disabled",
        "salt_epoch": 1,
    }
    arguments.update(overrides)
    return ExecutionFingerprint.build(**arguments)


def descriptions(now: ExecutionFingerprint, before: ExecutionFingerprint) -> list[str]:
    return [change.description for change in now.diff(before)]


def test_build_digests_values_and_keeps_tool_names() -> None:
    fp = build()
    assert fp.model == "qwen3"
    assert fp.instructions == sha256_hex(canonical_json("be brief"))
    assert fp.tools == sha256_hex(canonical_json([WEATHER, SEARCH]))
    assert fp.tool_names == ("get_weather", "search")
    assert fp.tool_choice == sha256_hex(b'"auto"')
    assert fp.text == sha256_hex(canonical_json({"format": {"type": "text"}}))
    assert fp.reasoning == sha256_hex(b'{"effort":"low"}')
    assert (fp.parallel_tool_calls, fp.truncation, fp.salt_epoch) == (True, "disabled", 1)


def test_absent_values() -> None:
    fp = build(
        instructions=None,
        tools=None,
        tool_choice=None,
        parallel_tool_calls=None,
        text=None,
        reasoning=None,
        truncation=None,
    )
    assert (fp.instructions, fp.tools, fp.tool_choice, fp.text, fp.reasoning) == ("",) * 5
    assert fp.tool_names == ()
    assert fp.parallel_tool_calls is None
    assert fp.truncation == "disabled"
    assert build(tools=[]) == build(tools=None)
    assert build(truncation=None) == build(truncation="disabled")


def test_tool_labels() -> None:
    odd = {"type": "function", "name": ""}
    fp = build(tools=[WEATHER, MCP, WEB, {"type": "custom", "name": "apply_patch"}, odd, {}])
    assert fp.tool_names == (
        "get_weather",
        "deepwiki",
        "web_search",
        "apply_patch",
        "function",
        "<unnamed>",
    )


def test_tools_may_be_any_mapping() -> None:
    assert build(tools=[MappingProxyType(WEATHER)]) == build(tools=[WEATHER])


def test_instructions_may_be_structured() -> None:
    structured = [{"role": "developer", "content": "be brief"}]
    assert build(instructions=structured).instructions == sha256_hex(canonical_json(structured))


def test_non_json_config_is_refused() -> None:
    with pytest.raises(TypeError):
        build(reasoning={"effort": object()})


def test_negative_epoch_is_refused() -> None:
    with pytest.raises(ValueError, match="salt epoch"):
        build(salt_epoch=-1)


def test_digest_covers_every_field() -> None:
    base = build()
    assert base.digest == sha256_hex(canonical_json(base.to_dict()))
    variants = [
        dataclasses.replace(base, **{field.name: _other(getattr(base, field.name))})
        for field in dataclasses.fields(base)
    ]
    assert len({base.digest, *(v.digest for v in variants)}) == len(variants) + 1


def _other(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, tuple):
        return (*value, "extra")
    assert isinstance(value, str)
    return value + "x"


def test_to_dict_is_plain_json() -> None:
    data = build().to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["tool_names"] == ["get_weather", "search"]


def test_from_dict_accepts_a_tuple_of_names() -> None:
    data = build().to_dict()
    data["tool_names"] = ("get_weather", "search")
    assert ExecutionFingerprint.from_dict(data) == build()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"extra": 1}, "unknown \\['extra'\\]"),
        ({"model": 3}, "model must be a string"),
        ({"truncation": None}, "truncation must be a string"),
        ({"tool_names": "search"}, "tool_names"),
        ({"tool_names": ["a", 1]}, "tool_names"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"parallel_tool_calls": 1}, "parallel_tool_calls"),
        ({"salt_epoch": True}, "salt_epoch"),
        ({"salt_epoch": -1}, "salt_epoch"),
        ({"salt_epoch": "1"}, "salt_epoch"),
    ],
)
def test_from_dict_refuses_malformed_data(change: dict[str, object], message: str) -> None:
    data = build().to_dict() | change
    with pytest.raises(ValueError, match=message):
        ExecutionFingerprint.from_dict(data)


def test_from_dict_refuses_missing_keys() -> None:
    data = build().to_dict()
    del data["reasoning"]
    with pytest.raises(ValueError, match="missing \\['reasoning'\\]"):
        ExecutionFingerprint.from_dict(data)


def test_no_change_no_diff() -> None:
    assert build().diff(build()) == []


def test_diff_names_each_component() -> None:
    before = build()
    now = build(
        model="llama",
        instructions="be verbose",
        tools=[WEATHER, MCP],
        tool_choice="required",
        parallel_tool_calls=False,
        text={"format": {"type": "json_object"}},
        reasoning={"effort": "high"},
        truncation="auto",
        salt_epoch=2,
    )
    assert now.diff(before) == [
        FingerprintChange("model", "model changed from 'qwen3' to 'llama'"),
        FingerprintChange("instructions", "instructions changed"),
        FingerprintChange("tools", "tools changed: added 'deepwiki'; removed 'search'"),
        FingerprintChange("tool_choice", "tool_choice changed"),
        FingerprintChange("parallel_tool_calls", "parallel_tool_calls changed from True to False"),
        FingerprintChange("text", "text config changed"),
        FingerprintChange("reasoning", "reasoning config changed"),
        FingerprintChange("truncation", "truncation changed from 'disabled' to 'auto'"),
        FingerprintChange(
            "salt_epoch", "cache salt epoch changed from 1 to 2 (tenant salt rotated)"
        ),
    ]


def test_diff_says_when_a_value_appears_or_disappears() -> None:
    bare = build(instructions=None, tool_choice=None, text=None, reasoning=None)
    assert descriptions(build(), bare) == [
        "instructions added",
        "tool_choice added",
        "text config added",
        "reasoning config added",
    ]
    assert descriptions(bare, build()) == [
        "instructions removed",
        "tool_choice removed",
        "text config removed",
        "reasoning config removed",
    ]


def test_diff_of_parallel_tool_calls_from_unset() -> None:
    assert descriptions(build(parallel_tool_calls=False), build(parallel_tool_calls=None)) == [
        "parallel_tool_calls changed from None to False"
    ]


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [
        ([WEATHER], [WEATHER, SEARCH], "tools changed: added 'search'"),
        ([WEATHER, SEARCH], [WEATHER], "tools changed: removed 'search'"),
        ([WEB], [WEB, WEB], "tools changed: added 'web_search'"),
        (None, [WEATHER], "tools changed: added 'get_weather'"),
        ([WEATHER, SEARCH], [SEARCH, WEATHER], "tools reordered"),
        (
            [WEATHER],
            [WEATHER | {"description": "now documented"}],
            "tools changed (same names, different definitions)",
        ),
    ],
)
def test_diff_of_tools(before: Any, now: Any, expected: str) -> None:
    assert descriptions(build(tools=now), build(tools=before)) == [expected]


def test_diff_notices_names_even_if_the_tool_digest_matches() -> None:
    # Only reachable through from_dict with inconsistent data, but a diff
    # should never report "no change" for two different fingerprints.
    now = dataclasses.replace(build(), tool_names=("renamed", "search"))
    assert descriptions(now, build()) == ["tools changed: added 'renamed'; removed 'get_weather'"]


fingerprints = st.builds(
    ExecutionFingerprint,
    model=st.text(max_size=5),
    instructions=st.sampled_from(["", "a" * 64, "b" * 64]),
    tools=st.sampled_from(["", "c" * 64]),
    tool_names=st.lists(st.sampled_from(["f", "g", "web_search"]), max_size=3).map(tuple),
    tool_choice=st.sampled_from(["", "d" * 64]),
    parallel_tool_calls=st.none() | st.booleans(),
    text=st.sampled_from(["", "e" * 64]),
    reasoning=st.sampled_from(["", "f" * 64]),
    truncation=st.sampled_from(["auto", "disabled"]),
    salt_epoch=st.integers(min_value=0, max_value=3),
    reasoning_context=st.sampled_from(["", "current_turn"]),
)


@given(fingerprints)
def test_dict_round_trip(fp: ExecutionFingerprint) -> None:
    data = json.loads(json.dumps(fp.to_dict()))
    again = ExecutionFingerprint.from_dict(data)
    assert again == fp
    assert again.digest == fp.digest


@given(fingerprints, fingerprints)
def test_diff_is_empty_exactly_when_equal(a: ExecutionFingerprint, b: ExecutionFingerprint) -> None:
    assert (a.diff(b) == []) == (a == b)
    assert (a.digest == b.digest) == (a == b)
    assert [c.component for c in a.diff(b)] == [c.component for c in b.diff(a)]


def test_tokenizer_identity_is_optional_and_diffed_only_when_both_known() -> None:
    plain = build()
    assert "tokenizer" not in plain.to_dict()
    bound = dataclasses.replace(plain, tokenizer="root:/models/a")
    assert bound.to_dict()["tokenizer"] == "root:/models/a"
    assert ExecutionFingerprint.from_dict(bound.to_dict()) == bound
    assert ExecutionFingerprint.from_dict(plain.to_dict()).tokenizer == ""
    assert bound.diff(plain) == [] and plain.diff(bound) == []
    other = dataclasses.replace(plain, tokenizer="root:/models/b")
    assert [c.component for c in other.diff(bound)] == ["tokenizer"]


def test_the_reasoning_context_is_its_own_component_and_the_default_changes_no_digest() -> None:
    plain = build()
    # all_turns is what every turn got before the field existed: same digest as none.
    assert build(reasoning_context="all_turns") == plain
    assert "reasoning_context" not in plain.to_dict()
    current = build(reasoning_context="current_turn")
    assert current.to_dict()["reasoning_context"] == "current_turn"
    assert ExecutionFingerprint.from_dict(current.to_dict()) == current
    assert current.digest != plain.digest
    assert [c.component for c in current.diff(plain)] == ["reasoning_context"]
    assert descriptions(plain, current) == [
        "reasoning context changed from 'current_turn' to 'all_turns'"
    ]
