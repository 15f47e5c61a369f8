"""The placement rule (``cache/placement.py``), table-driven: which replica a round goes
to, and why, from resident prefixes, loads, health and the previous round's replica; the
session's hashed home; the failover's next-best. And the placement book's memory
(``cache/placement_book.py``): ejection back-offs that drop residency, rounds served."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from agentic_api.cache.placement import (
    Candidate,
    Decision,
    Limits,
    Load,
    failover,
    home_of,
    place,
)
from agentic_api.cache.placement_book import PlacementBook
from agentic_api.cache.residency.events import Batch, BlocksStored
from agentic_api.cache.residency.tracker import ResidencyTracker
from agentic_api.cache.residency.tree import content_keys

LIMITS = Limits(max_waiting=2, max_kv_usage=0.9, spill_share=0.5)
IDLE = Load(0, 0.1)
BUSY = Load(5, 0.5)  # waiting past max_waiting
FULL = Load(0, 0.95)  # KV usage past max_kv_usage
SOME = Load(1, 0.2)
# An idle replica whose /metrics says its KV cache holds 4,096 tokens.
ROOMY = Load(0, 0.1, capacity_tokens=4096)
# What the session placed comes back with (the capacity cases weigh it).
DEMAND = 1000
NAMES = ("a", "b", "c")


def session_homed_on(name: str, names: tuple[str, ...] = NAMES) -> str:
    """A session key whose hashed home is ``name``."""
    for i in range(1000):
        key = f"sess-{i}"
        if home_of(key, names) == name:
            return key
    raise AssertionError("no key found")


@dataclass(frozen=True)
class Case:
    why: str
    candidates: tuple[Candidate, ...]
    home: str
    previous: str | None
    replica: str
    reason: str


CASES = [
    Case(
        "the longest resident prefix wins",
        (Candidate("a", 32, IDLE), Candidate("b", 256, IDLE), Candidate("c", 0, IDLE)),
        "a",
        None,
        "b",
        "resident_prefix",
    ),
    Case(
        "it wins over the previous round's replica and the home",
        (Candidate("a", 64, IDLE), Candidate("b", 0, IDLE), Candidate("c", 128, IDLE)),
        "b",
        "a",
        "c",
        "resident_prefix",
    ),
    Case(
        "a tie goes to the previous round's replica",
        (Candidate("a", 128, IDLE), Candidate("b", 128, IDLE), Candidate("c", 0, IDLE)),
        "a",
        "b",
        "b",
        "resident_prefix",
    ),
    Case(
        "a tie without a previous round goes to the home",
        (Candidate("a", 128, IDLE), Candidate("b", 128, IDLE), Candidate("c", 0, IDLE)),
        "b",
        None,
        "b",
        "resident_prefix",
    ),
    Case(
        "nothing resident: the previous round's replica",
        (Candidate("a", 0, IDLE), Candidate("b", 0, IDLE), Candidate("c", 0, IDLE)),
        "a",
        "c",
        "c",
        "home",
    ),
    Case(
        "nothing resident, no previous round: the hashed home",
        (Candidate("a", 0, IDLE), Candidate("b", 0, IDLE), Candidate("c", 0, IDLE)),
        "b",
        None,
        "b",
        "home",
    ),
    Case(
        "an ejected holder is passed over",
        (Candidate("a", 512, IDLE, healthy=False), Candidate("b", 64, IDLE), Candidate("c")),
        "c",
        "a",
        "b",
        "resident_prefix",
    ),
    Case(
        "an ejected previous replica is not the home",
        (Candidate("a", 0, IDLE, healthy=False), Candidate("b", 0, IDLE), Candidate("c", 0, IDLE)),
        "c",
        "a",
        "c",
        "home",
    ),
    Case(
        "every replica ejected: still placed (the back-off is a guess)",
        (
            Candidate("a", 0, IDLE, healthy=False),
            Candidate("b", 96, IDLE, healthy=False),
            Candidate("c", 0, IDLE, healthy=False),
        ),
        "a",
        None,
        "b",
        "resident_prefix",
    ),
    Case(
        "saturated holder (waiting): the least loaded within the share of the best",
        (Candidate("a", 200, BUSY), Candidate("b", 120, SOME), Candidate("c", 110, IDLE)),
        "a",
        None,
        "c",
        "spill_load",
    ),
    Case(
        "saturated holder (KV usage): spills the same way",
        (Candidate("a", 200, FULL), Candidate("b", 120, SOME), Candidate("c", 0, IDLE)),
        "a",
        None,
        "b",
        "spill_load",
    ),
    Case(
        "none within the share: the least loaded of all",
        (Candidate("a", 400, BUSY), Candidate("b", 100, SOME), Candidate("c", 0, IDLE)),
        "a",
        None,
        "c",
        "spill_load",
    ),
    Case(
        "a saturated home spills too",
        (Candidate("a", 0, BUSY), Candidate("b", 0, SOME), Candidate("c", 0, IDLE)),
        "a",
        None,
        "c",
        "spill_load",
    ),
    Case(
        "all saturated, the holder the lightest: it stays",
        (Candidate("a", 300, Load(3, 0.5)), Candidate("b", 0, BUSY), Candidate("c", 0, BUSY)),
        "b",
        None,
        "a",
        "resident_prefix",
    ),
    Case(
        "an unread load is never saturated",
        (Candidate("a", 300, None), Candidate("b", 0, IDLE), Candidate("c", 0, IDLE)),
        "b",
        None,
        "a",
        "resident_prefix",
    ),
    Case(
        "a spill never goes to a replica whose load is unknown when a known one is lighter",
        (Candidate("a", 0, BUSY), Candidate("b", 0, None), Candidate("c", 0, SOME)),
        "a",
        None,
        "c",
        "spill_load",
    ),
    Case(
        "a new session's home is the replica with the most KV room, not its hash",
        (
            Candidate("a", 0, ROOMY, committed_tokens=3000),
            Candidate("b", 0, ROOMY, committed_tokens=500),
            Candidate("c", 0, ROOMY, committed_tokens=1500),
        ),
        "b",
        None,
        "b",
        "home",
    ),
    Case(
        "KV sizes unknown: the fewest claimed tokens make the home",
        (
            Candidate("a", 0, IDLE, committed_tokens=2),
            Candidate("b", 0, IDLE, committed_tokens=1),
            Candidate("c", 0, None, committed_tokens=2),
        ),
        "b",
        None,
        "b",
        "home",
    ),
    Case(
        "evicted, and its previous replica has no room for it: moved to the roomiest",
        (
            Candidate("a", 0, ROOMY, committed_tokens=3500),
            Candidate("b", 0, ROOMY, committed_tokens=1000),
            Candidate("c", 0, ROOMY, committed_tokens=2000),
        ),
        "b",
        "a",
        "b",
        "capacity",
    ),
    Case(
        "evicted, its previous replica still has room: it stays",
        (
            Candidate("a", 0, ROOMY, committed_tokens=2000),
            Candidate("b", 0, ROOMY, committed_tokens=0),
            Candidate("c", 0, ROOMY, committed_tokens=0),
        ),
        "b",
        "a",
        "a",
        "home",
    ),
    Case(
        "no replica has room for it: it stays where it was",
        (
            Candidate("a", 0, ROOMY, committed_tokens=3500),
            Candidate("b", 0, ROOMY, committed_tokens=3300),
            Candidate("c", 0, ROOMY, committed_tokens=3400),
        ),
        "b",
        "a",
        "a",
        "home",
    ),
    Case(
        "a shared prefix resident on two: the previous one without room gives way",
        (
            Candidate("a", 256, ROOMY, committed_tokens=3500),
            Candidate("b", 256, ROOMY, committed_tokens=500),
            Candidate("c", 0, ROOMY, committed_tokens=0),
        ),
        "c",
        "a",
        "b",
        "capacity",
    ),
    Case(
        "no room where the longest prefix is, but moving recomputes half of it: it stays",
        (
            Candidate("a", 512, ROOMY, committed_tokens=4000),
            Candidate("b", 0, ROOMY, committed_tokens=0),
            Candidate("c", 0, ROOMY, committed_tokens=100),
        ),
        "b",
        "a",
        "a",
        "resident_prefix",
    ),
    Case(
        "no room where only a shared prefix is: it moves to the roomiest, once",
        (
            Candidate("a", 448, ROOMY, committed_tokens=4000),
            Candidate("b", 0, ROOMY, committed_tokens=0),
            Candidate("c", 0, ROOMY, committed_tokens=100),
        ),
        "b",
        "a",
        "b",
        "capacity",
    ),
    Case(
        "room where the longest prefix is: it stays however little it holds",
        (
            Candidate("a", 64, ROOMY, committed_tokens=2000),
            Candidate("b", 0, ROOMY, committed_tokens=0),
            Candidate("c", 0, ROOMY, committed_tokens=0),
        ),
        "b",
        "a",
        "a",
        "resident_prefix",
    ),
    Case(
        "no room anywhere else: the longest prefix stays",
        (
            Candidate("a", 64, ROOMY, committed_tokens=4000),
            Candidate("b", 0, ROOMY, committed_tokens=3500),
            Candidate("c", 0, ROOMY, committed_tokens=3600),
        ),
        "b",
        "a",
        "a",
        "resident_prefix",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
def test_the_rule(case: Case) -> None:
    healthy = tuple(c.name for c in case.candidates if c.healthy) or NAMES
    key = session_homed_on(case.home, healthy)
    decision = place(case.candidates, key, LIMITS, previous=case.previous, demand=DEMAND)
    assert (decision.replica, decision.reason) == (case.replica, case.reason)
    assert decision.resident == tuple((c.name, c.resident_tokens) for c in case.candidates)
    assert decision.replica not in decision.fallbacks
    assert decision.home == case.home


def test_the_same_candidates_always_give_the_same_decision() -> None:
    candidates = (Candidate("a", 16, SOME), Candidate("b", 16, SOME), Candidate("c", 0, IDLE))
    decisions = {place(candidates, "sess-x", LIMITS) for _ in range(20)}
    assert len(decisions) == 1


def test_homes_spread_over_replicas_and_stay_when_another_leaves() -> None:
    keys = [f"session-{i}" for i in range(600)]
    homes = {key: home_of(key, NAMES) for key in keys}
    spread = Counter(homes.values())
    assert set(spread) == set(NAMES)
    assert min(spread.values()) > 600 / 3 * 0.7
    # "c" ejected: only its sessions move; a's and b's keep their home.
    without_c = {key: home_of(key, ("a", "b")) for key in keys}
    for key in keys:
        if homes[key] != "c":
            assert without_c[key] == homes[key]


def test_fallbacks_rank_by_resident_prefix_then_load() -> None:
    candidates = (
        Candidate("a", 64, SOME),
        Candidate("b", 256, IDLE),
        Candidate("c", 64, IDLE),
    )
    decision = place(candidates, session_homed_on("a"), LIMITS)
    assert decision.replica == "b"
    # a and c tie on residency: a is the home.
    assert decision.fallbacks == ("a", "c")


def test_failover_goes_to_the_next_best_once_per_replica_left() -> None:
    decision = Decision("b", "resident_prefix", (("a", 1), ("b", 2), ("c", 0)), ("a", "c"), "a")
    moved = failover(decision, "b")
    assert (moved.replica, moved.reason, moved.fallbacks) == ("a", "failover", ("c",))
    assert moved.resident_tokens == 1
    # An ejected next-best is skipped while another is left.
    assert failover(decision, "b", frozenset({"a"})).replica == "c"
    assert failover(decision, "b", frozenset({"a", "c"})).replica == "a"
    with pytest.raises(LookupError):
        failover(Decision("a", "home", (("a", 0),), (), "a"), "a")


def test_no_candidates_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        place((), "s", LIMITS)
    with pytest.raises(ValueError):
        home_of("s", ())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stored(seq: int) -> Batch:
    """One block of tokens 0..15 under "salt", as a replica's KV events say it."""
    tokens = list(range(16))
    event = BlocksStored(
        hashes=(seq * 10 + 1,),
        block_size=16,
        session_id="s1",
        salt="salt",
        contents=tuple(content_keys(tokens, 16)),
    )
    return Batch(seq=seq, ts=0.0, events=(event,))


def test_an_ejection_backs_off_longer_each_time_and_drops_the_residency() -> None:
    clock = Clock()
    tracker = ResidencyTracker(["a", "b"], clock=clock)
    tracker.apply("a", stored(0))
    assert tracker.prefix(list(range(16)), "salt")[0].resident_tokens == 16
    book = PlacementBook(["a", "b"], eject_seconds=5, residency=tracker, clock=clock)
    assert book.eject("a", "refused") == 5
    assert book.ejected() == {"a"}
    # Never placed on what it held before: its residency is gone.
    assert tracker.prefix(list(range(16)), "salt")[0].resident_tokens == 0
    clock.now += 5
    assert book.ejected() == frozenset()
    # Failed again right after: twice as long; a success then resets the count.
    assert book.eject("a", "health") == 10
    clock.now += 10
    book.healthy("a")
    assert book.eject("a", "refused") == 5
    for _ in range(6):
        clock.now += 100
        last = book.eject("a", "refused")
    assert last == 40  # capped at 8x


def test_a_healthy_answer_during_a_back_off_does_not_end_it() -> None:
    clock = Clock()
    book = PlacementBook(["a"], eject_seconds=5, clock=clock)
    book.eject("a", "refused")
    book.healthy("a")
    assert book.ejected() == {"a"}


def test_rounds_served_are_kept_bounded() -> None:
    book = PlacementBook(["a"], eject_seconds=5, max_served=2)
    for i in range(3):
        book.served(f"resp_{i}", "a", i)
    assert book.served_by("resp_0") is None
    served = book.served_by("resp_2")
    assert served is not None and (served.replica, served.tokens) == ("a", 2)


def test_claims_sum_per_replica_count_unknown_sizes_as_the_mean_and_lapse() -> None:
    clock = Clock()
    book = PlacementBook(["a", "b"], eject_seconds=5, claim_seconds=60, clock=clock)
    # Nothing known yet: each claim counts one, so sessions starting together spread.
    book.claim("s1", "a", None)
    book.claim("s2", "b", None)
    book.claim("s3", "a", None)
    assert book.committed() == {"a": 2, "b": 1}
    assert book.committed(excluding="s3") == {"a": 1, "b": 1}
    # Sizes known: the unknown one counts as their mean.
    book.claim("s1", "a", 1000)
    book.claim("s2", "b", 3000)
    assert book.committed() == {"a": 3000, "b": 3000}
    # A placement of unknown size on the same replica keeps the known size...
    book.claim("s1", "a", None)
    claim = book.claim_of("s1")
    assert claim is not None and claim.tokens == 1000
    # ...a move to another replica does not (it is not known there yet).
    book.claim("s2", "a", None)
    assert book.committed() == {"a": 1000 + 2 * 1000, "b": 0}
    clock.now += 61
    book.claim("s4", "b", 500)
    assert book.committed() == {"a": 0, "b": 500}
    assert book.claim_of("s1") is None


def test_claims_are_bounded_by_the_sessions_kept() -> None:
    book = PlacementBook(["a"], eject_seconds=5, max_sessions=2)
    for i in range(3):
        book.claim(f"s{i}", "a", 100)
    assert book.claim_of("s0") is None
    assert book.committed() == {"a": 200}


def test_an_unknown_demand_never_moves_a_session() -> None:
    candidates = (
        Candidate("a", 64, ROOMY, committed_tokens=4090),
        Candidate("b", 0, ROOMY, committed_tokens=0),
    )
    assert place(candidates, "s", LIMITS, previous="a").replica == "a"
    assert place(candidates, "s", LIMITS, previous="a", demand=1000).reason == "capacity"
    never = Limits(max_waiting=2, max_kv_usage=0.9, spill_share=0.5, move_share=0)
    assert place(candidates, "s", never, previous="a", demand=1000).replica == "a"
