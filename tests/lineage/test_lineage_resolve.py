from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from lineage.lineage import (
    CONTENT_SESSION_ITEMS,
    ParentLineage,
    ResponseLineage,
    SessionSource,
    resolve_lineage,
)

TENANT = "ten_1"
PARENT = ParentLineage(response_id="resp_parent", session_id="conv_or_sess", depth=3)
ITEMS = [b'{"role":"developer"}', b'{"role":"user"}', b'{"role":"assistant"}']

tenants = st.text(min_size=1, max_size=8)
keys = st.text(min_size=1, max_size=8)
item_lists = st.lists(st.binary(max_size=4), min_size=1, max_size=5)


def _derived(session_id: str) -> bool:
    return re.fullmatch(r"sess_[0-9a-f]{32}", session_id) is not None


def test_conversation_is_the_session() -> None:
    got = resolve_lineage(tenant_id=TENANT, response_id="resp_1", conversation_id="conv_9")
    assert got == ResponseLineage(
        session_id="conv_9",
        continuation_id="resp_1",
        parent_id=None,
        depth=0,
        session_source=SessionSource.CONVERSATION,
    )


def test_a_chain_inherits_the_parents_session() -> None:
    got = resolve_lineage(tenant_id=TENANT, response_id="resp_2", parent=PARENT)
    assert got == ResponseLineage(
        session_id="conv_or_sess",
        continuation_id="resp_2",
        parent_id="resp_parent",
        depth=4,
        session_source=SessionSource.PARENT,
    )


def test_conversation_wins_over_parent_but_parent_still_sets_ancestry() -> None:
    got = resolve_lineage(
        tenant_id=TENANT,
        response_id="resp_3",
        conversation_id="conv_9",
        parent=PARENT,
        prompt_cache_key="k",
        first_items=ITEMS,
    )
    assert (got.session_id, got.session_source) == ("conv_9", SessionSource.CONVERSATION)
    assert (got.parent_id, got.depth) == ("resp_parent", 4)


def test_parent_wins_over_prompt_cache_key_and_content() -> None:
    got = resolve_lineage(
        tenant_id=TENANT, response_id="r", parent=PARENT, prompt_cache_key="k", first_items=ITEMS
    )
    assert got.session_source is SessionSource.PARENT


def test_prompt_cache_key_wins_over_content() -> None:
    got = resolve_lineage(
        tenant_id=TENANT, response_id="r", prompt_cache_key="k", first_items=ITEMS
    )
    assert got.session_source is SessionSource.PROMPT_CACHE_KEY
    assert _derived(got.session_id)
    assert (got.parent_id, got.depth) == (None, 0)


def test_content_is_the_last_resort() -> None:
    got = resolve_lineage(tenant_id=TENANT, response_id="r", first_items=ITEMS)
    assert got.session_source is SessionSource.CONTENT
    assert _derived(got.session_id)


def test_an_empty_prompt_cache_key_counts_as_absent() -> None:
    got = resolve_lineage(tenant_id=TENANT, response_id="r", prompt_cache_key="", first_items=ITEMS)
    assert got == resolve_lineage(tenant_id=TENANT, response_id="r", first_items=ITEMS)


def test_derived_sessions_are_pinned() -> None:
    # Session ids outlive a deploy (they key router affinity and stored
    # rows), so the derivation must not drift.
    by_key = resolve_lineage(tenant_id="ten_1", response_id="r", prompt_cache_key="k")
    by_content = resolve_lineage(
        tenant_id="ten_1", response_id="r", first_items=[b'{"a":1}', b"[]"]
    )
    assert by_key.session_id == "sess_d0c229cca45baf2a71fed21983561cd2"
    assert by_content.session_id == "sess_8b052a2faa6ed7eb29f25150ec16a769"


def test_headers() -> None:
    got = resolve_lineage(tenant_id=TENANT, response_id="resp_1", conversation_id="conv_9")
    assert got.headers() == {"X-Session-ID": "conv_9", "X-Continuation-ID": "resp_1"}


def test_nothing_to_place_the_session_by_is_an_error() -> None:
    with pytest.raises(ValueError, match="cannot place a response in a session"):
        resolve_lineage(tenant_id=TENANT, response_id="r")
    with pytest.raises(ValueError, match="cannot place a response in a session"):
        resolve_lineage(tenant_id=TENANT, response_id="r", prompt_cache_key="", first_items=[])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tenant_id": "", "response_id": "r", "conversation_id": "c"}, "tenant id"),
        ({"tenant_id": "t", "response_id": "", "conversation_id": "c"}, "response id"),
        ({"tenant_id": "t", "response_id": "r", "conversation_id": ""}, "conversation id"),
        (
            {"tenant_id": "t", "response_id": "r", "parent": ParentLineage("p", "s", -1)},
            "parent depth",
        ),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_lineage(**kwargs)  # type: ignore[arg-type]


def test_lineage_values_are_frozen() -> None:
    got = resolve_lineage(tenant_id=TENANT, response_id="r", conversation_id="c")
    with pytest.raises(AttributeError):
        got.depth = 5  # type: ignore[misc]


@given(item_lists, st.lists(st.binary(max_size=4), max_size=5))
def test_content_session_survives_a_growing_history(first: list[bytes], more: list[bytes]) -> None:
    assume(len(first) >= CONTENT_SESSION_ITEMS)
    before = resolve_lineage(tenant_id=TENANT, response_id="r1", first_items=first)
    after = resolve_lineage(tenant_id=TENANT, response_id="r2", first_items=first + more)
    assert before.session_id == after.session_id


@given(item_lists, item_lists)
def test_content_sessions_differ_when_their_head_differs(a: list[bytes], b: list[bytes]) -> None:
    same = (
        resolve_lineage(tenant_id=TENANT, response_id="r", first_items=a).session_id
        == resolve_lineage(tenant_id=TENANT, response_id="r", first_items=b).session_id
    )
    assert same == (a[:CONTENT_SESSION_ITEMS] == b[:CONTENT_SESSION_ITEMS])


@given(tenants, tenants, keys)
def test_tenants_never_share_a_key_derived_session(tenant_a: str, tenant_b: str, key: str) -> None:
    assume(tenant_a != tenant_b)
    a = resolve_lineage(tenant_id=tenant_a, response_id="r", prompt_cache_key=key)
    b = resolve_lineage(tenant_id=tenant_b, response_id="r", prompt_cache_key=key)
    assert a.session_id != b.session_id


@given(tenants, tenants, item_lists)
def test_tenants_never_share_a_content_session(
    tenant_a: str, tenant_b: str, xs: list[bytes]
) -> None:
    assume(tenant_a != tenant_b)
    a = resolve_lineage(tenant_id=tenant_a, response_id="r", first_items=xs)
    b = resolve_lineage(tenant_id=tenant_b, response_id="r", first_items=xs)
    assert a.session_id != b.session_id


@given(tenants, keys)
def test_key_sessions_are_stable_and_hide_the_key(tenant: str, key: str) -> None:
    a = resolve_lineage(tenant_id=tenant, response_id="r1", prompt_cache_key=key)
    b = resolve_lineage(tenant_id=tenant, response_id="r2", prompt_cache_key=key)
    assert a.session_id == b.session_id
    assert _derived(a.session_id)
    assert a.continuation_id == "r1"


@given(tenants, st.text(min_size=1, max_size=6))
def test_a_key_and_the_same_bytes_as_content_do_not_collide(tenant: str, key: str) -> None:
    by_key = resolve_lineage(tenant_id=tenant, response_id="r", prompt_cache_key=key)
    by_content = resolve_lineage(tenant_id=tenant, response_id="r", first_items=[key.encode()])
    assert by_key.session_id != by_content.session_id


@given(st.integers(min_value=0, max_value=10_000))
def test_depth_is_one_more_than_the_parent(depth: int) -> None:
    parent = ParentLineage(response_id="p", session_id="s", depth=depth)
    assert resolve_lineage(tenant_id=TENANT, response_id="r", parent=parent).depth == depth + 1
