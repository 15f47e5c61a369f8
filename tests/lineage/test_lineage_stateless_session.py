"""Sessions of stateless requests (the Anthropic Messages API): the client's session id,
else its user id, else the first items; always hashed with the tenant."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lineage import SessionSource, resolve_lineage, resolve_stateless_session

ITEMS = [b'{"system":"be brief"}', b'{"role":"user","content":"hi"}', b'{"role":"assistant"}']


def _derived(session_id: str) -> bool:
    return re.fullmatch(r"sess_[0-9a-f]{32}", session_id) is not None


def test_the_client_session_wins_over_user_and_content() -> None:
    session, source = resolve_stateless_session(
        tenant_id="ten_1", client_session_id="abc", user_id="u", first_items=ITEMS
    )
    assert source is SessionSource.CLIENT_SESSION and _derived(session)
    assert session == resolve_stateless_session(tenant_id="ten_1", client_session_id="abc")[0]
    assert "abc" not in session


def test_user_id_then_content() -> None:
    by_user = resolve_stateless_session(tenant_id="ten_1", user_id="u", first_items=ITEMS)
    assert by_user[1] is SessionSource.USER_ID
    by_content = resolve_stateless_session(tenant_id="ten_1", first_items=ITEMS)
    assert by_content[1] is SessionSource.CONTENT
    assert by_user[0] != by_content[0]


def test_empty_values_count_as_absent() -> None:
    got = resolve_stateless_session(
        tenant_id="ten_1", client_session_id="", user_id="", first_items=ITEMS
    )
    assert got[1] is SessionSource.CONTENT


def test_only_the_first_items_decide_a_content_session() -> None:
    short = resolve_stateless_session(tenant_id="ten_1", first_items=ITEMS[:2])
    longer = resolve_stateless_session(tenant_id="ten_1", first_items=[*ITEMS, b"more"])
    assert short == longer


def test_content_sessions_match_a_responses_root_with_the_same_items() -> None:
    # One rule for every stateless client: the same first items, the same session.
    root = resolve_lineage(tenant_id="ten_1", response_id="resp_1", first_items=ITEMS)
    assert resolve_stateless_session(tenant_id="ten_1", first_items=ITEMS)[0] == root.session_id


def test_a_client_session_and_a_user_id_with_the_same_value_differ() -> None:
    a = resolve_stateless_session(tenant_id="ten_1", client_session_id="same")
    b = resolve_stateless_session(tenant_id="ten_1", user_id="same")
    assert a[0] != b[0]


@given(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
def test_two_tenants_never_share_a_session(key: str, other: str) -> None:
    a = resolve_stateless_session(tenant_id="ten_a", client_session_id=key)
    b = resolve_stateless_session(tenant_id="ten_b", client_session_id=other)
    assert a[0] != b[0]


def test_nothing_to_go_on_is_refused() -> None:
    with pytest.raises(ValueError):
        resolve_stateless_session(tenant_id="ten_1")
    with pytest.raises(ValueError):
        resolve_stateless_session(tenant_id="", client_session_id="x")
