"""The in-process store of verified histories: what it returns, and what it refuses."""

from __future__ import annotations

from agentic_api.storage.verified_histories import VerifiedHistories
from agentic_api.wire.items import Item
from lineage import IdKind, mint_id

# A chain's session outside conversations: its root response's id (or a derived key).
SESSION = mint_id(IdKind.RESPONSE)


def items(count: int, size: int = 10) -> list[Item]:
    return [Item(f"msg_{i}", "message", b"x" * size) for i in range(count)]


def test_returns_the_kept_history_only_for_the_same_digest_and_count() -> None:
    store = VerifiedHistories(budget_bytes=10_000)
    history = items(4)
    store.keep("resp_a", digest="d1", session_id=SESSION, items=history)
    assert store.get("resp_a", digest="d1", item_count=4, session_id=SESSION) == tuple(history)
    assert store.get("resp_a", digest="d2", item_count=4, session_id=SESSION) is None
    assert store.get("resp_a", digest="d1", item_count=5, session_id=SESSION) is None
    assert store.get("resp_a", digest=None, item_count=4, session_id=SESSION) is None
    assert store.get("resp_b", digest="d1", item_count=4, session_id=SESSION) is None


def test_chains_that_began_in_a_conversation_are_not_kept() -> None:
    store = VerifiedHistories(budget_bytes=10_000)
    conversation = mint_id(IdKind.CONVERSATION)
    store.keep("resp_a", digest="d1", session_id=conversation, items=items(2))
    assert len(store) == 0
    assert store.get("resp_a", digest="d1", item_count=2, session_id=conversation) is None


def test_least_recently_used_histories_go_first_within_the_budget() -> None:
    store = VerifiedHistories(budget_bytes=100)
    for name in ("a", "b", "c"):
        store.keep(f"resp_{name}", digest=name, session_id=SESSION, items=items(3))  # 30 bytes
    assert store.charged_bytes == 90
    assert store.get("resp_a", digest="a", item_count=3, session_id=SESSION) is not None
    store.keep("resp_d", digest="d", session_id=SESSION, items=items(3))
    # b was the least recently used (a was just read).
    assert store.get("resp_b", digest="b", item_count=3, session_id=SESSION) is None
    assert store.get("resp_a", digest="a", item_count=3, session_id=SESSION) is not None
    assert store.charged_bytes == 90


def test_too_large_or_disabled_or_forgotten() -> None:
    store = VerifiedHistories(budget_bytes=50)
    store.keep("resp_big", digest="x", session_id=SESSION, items=items(6))  # 60 > 50
    assert len(store) == 0
    store.keep("resp_a", digest="a", session_id=SESSION, items=items(2))
    store.forget("resp_a")
    assert (len(store), store.charged_bytes) == (0, 0)
    disabled = VerifiedHistories(budget_bytes=0)
    disabled.keep("resp_a", digest="a", session_id=SESSION, items=items(1))
    assert len(disabled) == 0


def test_keeping_again_replaces_and_recharges() -> None:
    store = VerifiedHistories(budget_bytes=1_000)
    store.keep("resp_a", digest="a", session_id=SESSION, items=items(2))
    store.keep("resp_a", digest="a2", session_id=SESSION, items=items(5))
    assert store.charged_bytes == 50
    assert store.get("resp_a", digest="a2", item_count=5, session_id=SESSION) is not None


def test_the_grandparent_or_the_sessions_latest_kept_turn_is_offered_as_an_ancestor() -> None:
    store = VerifiedHistories(budget_bytes=10_000)
    store.keep("resp_a", digest="da", session_id=SESSION, items=items(2))
    store.keep("resp_b", digest="db", session_id=SESSION, items=items(4))
    ancestor = store.ancestor_for(None, SESSION, below=6)
    assert ancestor is not None
    assert (ancestor.response_id, ancestor.digest, len(ancestor.items)) == ("resp_b", "db", 4)
    # A history no longer than the kept one cannot descend from it.
    assert store.ancestor_for(None, SESSION, below=4) is None
    assert store.ancestor_for(None, mint_id(IdKind.RESPONSE), below=6) is None
    # The parent's own parent, when kept, comes first: it is certainly an ancestor.
    grandparent = store.ancestor_for("resp_a", SESSION, below=6)
    assert grandparent is not None and grandparent.response_id == "resp_a"
    assert store.ancestor_for("resp_unknown", SESSION, below=6) == ancestor


def test_an_evicted_turn_is_no_longer_offered_as_an_ancestor() -> None:
    store = VerifiedHistories(budget_bytes=60)
    other = mint_id(IdKind.RESPONSE)
    store.keep("resp_a", digest="da", session_id=SESSION, items=items(3))  # 30 bytes
    store.keep("resp_b", digest="db", session_id=other, items=items(3))
    store.keep("resp_c", digest="dc", session_id=other, items=items(3))  # evicts resp_a
    assert store.ancestor_for(None, SESSION, below=10) is None
    store.forget("resp_c")
    assert store.ancestor_for(None, other, below=10) is None
