"""The block tree behind branch residency: how many leading tokens of one sequence (a
response's prompt + output) a replica holds, fed with the real vLLM 0.32 capture and
with synthetic streams for forks, shared prefixes, re-stores and what cannot be matched.

A stream's blocks are found by content (token ids under the parent's hash, the salt at
the root), so a branch whose own blocks were evicted shows as not resident while its
sibling does, and a session that starts on another's cached prefix shows it resident."""

from __future__ import annotations

from array import array
from typing import Any

import msgpack
from prometheus_client import REGISTRY

from agentic_api.cache.residency.events import Batch, BlocksStored, decode_frames
from agentic_api.cache.residency.tracker import ResidencyTracker
from tests.unit.test_residency_map import STEPS
from tests.upstream_sim.kv_events import CLEARED, removed, stored

REPLICA = "replica-a"


def tokens_of(steps: list[str]) -> array[int]:
    """The sequence the captured requests' stores spell, in order (one chain)."""
    found = array("I")
    for name in steps:
        for frames in STEPS[name].frames:
            for raw in msgpack.unpackb(frames[2], strict_map_key=False)[1]:
                if raw.get("type") == "BlockStored":
                    found.extend(raw["token_ids"])
    return found


def test_a_captured_chain_is_resident_under_its_salt_until_pressure_evicts_it() -> None:
    target = ResidencyTracker([REPLICA])
    for name in ("turn1", "turn2"):
        for batch in STEPS[name].batches:
            target.apply(REPLICA, batch)
    chain = tokens_of(["turn1", "turn2"])
    assert len(chain) == 25 * 32
    stores = [e for b in STEPS["turn2"].batches for e in b.events if isinstance(e, BlocksStored)]
    assert stores[0].parent is not None and stores[0].contents is not None
    (found,) = target.prefix(chain, "salt-one")
    assert (found.replica, found.block_size, found.resident_tokens) == (REPLICA, 32, 800)
    # Turn 1's prompt alone, and the chain with a token more: only full blocks count.
    assert target.prefix(chain[:512], "salt-one")[0].resident_tokens == 512
    assert target.prefix(array("I", [*chain, 7]), "salt-one")[0].resident_tokens == 800
    # Another tenant's salt, a changed first block: nothing of it is this chain's.
    assert target.prefix(chain, "salt-two")[0].resident_tokens == 0
    assert target.prefix(array("I", [9, *chain[1:]]), "salt-one")[0].resident_tokens == 0

    # The same prompt under salt-two, then sess-c re-reporting sess-a's blocks.
    for name in ("other_salt", "full_report"):
        for batch in STEPS[name].batches:
            target.apply(REPLICA, batch)
    assert target.prefix(chain[:512], "salt-two")[0].resident_tokens == 512
    assert target.prefix(chain, "salt-one")[0].resident_tokens == 800
    # Distinct long prompts evict the chain's blocks (vLLM drops them tail first).
    for batch in STEPS["pressure"].batches:
        target.apply(REPLICA, batch)
    assert target.prefix(chain, "salt-one")[0].resident_tokens == 0


BLOCK = 4
SALT = "salt"


def block(n: int) -> list[int]:
    return [n * 10 + i for i in range(BLOCK)]


def run(*numbers: int) -> list[int]:
    return [token for n in numbers for token in block(n)]


class Replica:
    """A bare publisher's side: numbered batches of hand-made events."""

    def __init__(self, target: ResidencyTracker) -> None:
        self.target = target
        self.seq = 0

    def send(self, *events: dict[str, Any]) -> None:
        payload = msgpack.packb([0.0, list(events), 0])
        self.target.apply(REPLICA, decode_frames([b"kv", self.seq.to_bytes(8, "big"), payload]))
        self.seq += 1

    def store(self, hashes: list[int], parent: int | None, session: str | None = "s") -> None:
        self.send(stored(hashes, parent, run(*hashes), BLOCK, SALT, session))


def resident(target: ResidencyTracker, *numbers: int, salt: str | None = SALT) -> int:
    (found,) = target.prefix(array("I", run(*numbers)), salt)
    return found.resident_tokens


def test_forked_branches_of_one_session_each_answer_for_their_own_blocks() -> None:
    target = ResidencyTracker([REPLICA])
    replica = Replica(target)
    replica.store([1, 2, 3], None)  # the shared history
    replica.store([4, 5], 3)  # branch one's turn
    replica.store([6, 7], 3)  # branch two's, forked from the same parent
    assert resident(target, 1, 2, 3, 4, 5) == resident(target, 1, 2, 3, 6, 7) == 5 * BLOCK
    # Other traffic evicts branch one's own blocks (tail first, as vLLM frees them).
    replica.send(removed(5), removed(4))
    assert resident(target, 1, 2, 3, 4, 5) == 3 * BLOCK
    assert resident(target, 1, 2, 3, 6, 7) == 5 * BLOCK
    # The session's tally cannot tell the two apart: 5 of its 7 blocks remain.
    (tally,) = target.session("s")
    assert tally.resident_blocks == 5


def test_a_session_starting_on_another_sessions_prefix_finds_it_resident() -> None:
    target = ResidencyTracker([REPLICA])
    replica = Replica(target)
    replica.store([1, 2, 3], None, session="writer")  # a shared system prompt
    # In vLLM's default report mode the reader's request reports only its new blocks.
    replica.store([8, 9], 3, session="reader")
    assert resident(target, 1, 2, 3, 8, 9) == 5 * BLOCK
    (tally,) = target.session("reader")
    assert tally.resident_tokens == 2 * BLOCK  # the session view shows what it stored
    # The shared block 2 goes: vLLM's lookup stops there, the reader's own blocks too.
    replica.send(removed(2))
    assert resident(target, 1, 2, 3, 8, 9) == BLOCK
    # Recomputed by a later request (same hash, same place): the rest is reachable again.
    replica.store([2], 1, session="writer")
    assert resident(target, 1, 2, 3, 8, 9) == 5 * BLOCK


def test_blocks_without_a_session_and_without_a_salt_are_found_too() -> None:
    target = ResidencyTracker([REPLICA])
    replica = Replica(target)
    replica.store([1, 2], None, session=None)
    assert resident(target, 1, 2) == 2 * BLOCK
    replica.send(stored([5, 6], None, run(5, 6), BLOCK, None, "s"))
    assert resident(target, 5, 6, salt=None) == 2 * BLOCK
    assert resident(target, 5, 6) == 0  # under our salt, another chain altogether


def test_what_token_ids_cannot_match_is_never_shown_resident() -> None:
    target = ResidencyTracker([REPLICA])
    replica = Replica(target)
    image = stored([1, 2], None, run(1, 2), BLOCK, SALT, "s")
    image["extra_keys"] = [[SALT], [["mm-digest", 0]]]  # block 2 holds an image
    replica.send(image)
    assert resident(target, 1, 2) == BLOCK
    adapter = stored([3], None, run(3), BLOCK, None, "s")
    adapter["lora_name"], adapter["extra_keys"] = "my-lora", [["my-lora", SALT]]
    replica.send(adapter)
    assert resident(target, 3) == 0
    # Token ids that do not come in whole blocks: nothing is matched.
    ragged = stored([4], None, run(4)[:-1], BLOCK, SALT, "s")
    replica.send(ragged)
    assert resident(target, 4) == 0


def test_a_reset_or_a_gap_forgets_the_tree_and_the_bound_forgets_the_oldest() -> None:
    target = ResidencyTracker([REPLICA])
    replica = Replica(target)
    replica.store([1, 2], None)
    replica.send(CLEARED)
    assert resident(target, 1, 2) == 0
    replica.store([1, 2], None)
    replica.seq += 1  # a lost batch may have removed anything
    replica.store([7], None)
    assert resident(target, 1, 2) == 0 and resident(target, 7) == BLOCK

    bounded = ResidencyTracker([REPLICA], max_blocks=3)
    small = Replica(bounded)
    before = REGISTRY.get_sample_value(
        "agentic_kv_residency_dropped_total", {"replica": REPLICA, "what": "tree_block"}
    )
    small.store([1, 2, 3], None)
    small.store([4], 3)
    # Block 1 went for room: the chain is unreachable from its root, never half-shown.
    assert resident(bounded, 1, 2, 3, 4) == 0
    after = REGISTRY.get_sample_value(
        "agentic_kv_residency_dropped_total", {"replica": REPLICA, "what": "tree_block"}
    )
    assert (after or 0) - (before or 0) == 1


def test_a_replica_that_reported_nothing_holds_nothing() -> None:
    target = ResidencyTracker([REPLICA, "replica-b"])
    Replica(target).store([1], None)
    found = {p.replica: p for p in target.prefix(array("I", run(1)), SALT)}
    assert found[REPLICA].resident_tokens == BLOCK
    assert (found["replica-b"].resident_tokens, found["replica-b"].block_size) == (0, None)
    empty = Batch(0, 0.0, ())
    target.apply("replica-b", empty)
    assert target.prefix(array("I"), SALT)[0].resident_tokens == 0


# Blocks stored before this process listened (issue 38, item 16).


def late(seq: int = 57) -> tuple[ResidencyTracker, Replica]:
    """A tracker that joined the replica's stream late (its first batch is not the
    engine's first), with one unrelated block reported so the block size is known."""
    target = ResidencyTracker([REPLICA])
    replica = Replica(target)
    replica.seq = seq
    replica.store([9], None, session="other")
    return target, replica


def view(target: ResidencyTracker, *numbers: int) -> tuple[int, bool]:
    (found,) = target.prefix(array("I", run(*numbers)), SALT)
    return found.resident_tokens, found.known


def test_a_prefix_stored_before_the_process_listened_is_unknown_never_zero() -> None:
    target, _replica = late()
    # Blocks 1..3 were cached before: nothing of them was reported here.
    assert view(target, 1, 2, 3, 4) == (0, False)
    # A replica followed from its engine's first batch has reported all it holds.
    fresh = ResidencyTracker([REPLICA])
    Replica(fresh).store([9], None, session="other")
    assert view(fresh, 1, 2, 3, 4) == (0, True)
    # A reset by a clear empties the cache: known again.
    _replica.send(CLEARED)
    assert view(target, 1, 2, 3, 4) == (0, True)


def test_a_turn_served_from_unreported_blocks_grafts_them_whichever_comes_first() -> None:
    for evidence_first in (False, True):
        target, replica = late()
        if evidence_first:
            # The turn's answer is in before its blocks' reports: the evidence waits.
            target.served("s", SALT, [*run(1, 2, 3, 4, 5), 1, 2], 12)
            assert view(target, 1, 2, 3, 4, 5) == (0, False)
        # Served blocks 1..3 (12 tokens) and stored 4 and 5 under block 3's hash.
        replica.store([4, 5], 3)
        if not evidence_first:
            assert view(target, 1, 2, 3, 4, 5) == (0, False)
            target.served("s", SALT, [*run(1, 2, 3, 4, 5), 1, 2], 12)
        assert view(target, 1, 2, 3, 4, 5) == (20, True), evidence_first
        assert view(target, 1, 2, 3) == (12, True)
        # The tail goes first, as vLLM evicts: a known stop.
        replica.send(removed(5))
        assert view(target, 1, 2, 3, 4, 5, 6) == (16, True)
        # Block 3 removed: the inferred blocks before it lose their evidence.
        replica.send(removed(3))
        assert view(target, 1, 2, 3) == (0, False)


def test_no_graft_from_another_session_a_removed_parent_or_a_turn_that_stored_nothing() -> None:
    target, replica = late()
    replica.store([4, 5], 3, session="someone-else")
    target.served("s", SALT, run(1, 2, 3, 4, 5), 12)
    assert view(target, 1, 2, 3, 4, 5) == (0, False)

    target, replica = late()
    replica.store([4, 5], 3)
    # Block 3 went before the turn's evidence came: its hash was never known here.
    replica.send(removed(3))
    target.served("s", SALT, run(1, 2, 3, 4, 5), 12)
    assert view(target, 1, 2, 3, 4, 5) == (0, False)

    target, replica = late()
    # Served 12 of 14 tokens: no block of its own, nothing to hang the served ones on.
    target.served("s", SALT, [*run(1, 2, 3), 1, 2], 12)
    assert view(target, 1, 2, 3) == (0, False)


def test_evidence_in_before_any_report_uses_the_upstreams_block_size() -> None:
    target = ResidencyTracker([REPLICA])
    replica = Replica(target)
    replica.seq = 57
    # Nothing reported yet (no block size): the upstream's block size keys the evidence.
    target.served("s", SALT, run(1, 2, 3, 4, 5), 12, block_size=BLOCK)
    replica.store([4, 5], 3)
    assert view(target, 1, 2, 3, 4, 5) == (20, True)
    # Without it the evidence cannot be read, and the prefix stays unknown.
    target = ResidencyTracker([REPLICA])
    replica = Replica(target)
    replica.seq = 57
    target.served("s", SALT, run(1, 2, 3, 4, 5), 12)
    replica.store([4, 5], 3)
    assert view(target, 1, 2, 3, 4, 5) == (0, False)
