"""What a round's placement is given (``turns/runner/placing.py``): the branch's resident
prefix per replica from the residency tree, the previous round's replica presumed to hold
that round only while its KV events lag (never past the lag, never once a batch arrived,
never when it is ejected), and the refusal rule (eject where unreachable, one failover per
turn, none for a 4xx, our credentials or an answer lost after the model ran)."""

from __future__ import annotations

import asyncio
from array import array
from types import SimpleNamespace
from typing import Any, cast

import pytest

from agentic_api.cache.placement import home_of
from agentic_api.cache.placement_book import PlacementBook
from agentic_api.cache.recent import TokenArtifact
from agentic_api.cache.residency.events import Batch, BlocksStored
from agentic_api.cache.residency.tracker import ResidencyTracker
from agentic_api.cache.residency.tree import content_keys
from agentic_api.errors import ApiError, UpstreamError
from agentic_api.runtime import Runtime
from agentic_api.settings import Settings
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.runner.placing import RoundPlacer, Target
from agentic_api.upstream.errors import UpstreamInterrupted

BLOCK = 16
SALT = "salt"
# The parent's prompt + output: 8 full blocks.
BRANCH = list(range(BLOCK * 8))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Artifacts:
    """The recent-artifacts memo, holding the parent's token ids."""

    def get(self, tenant_id: str, response_id: str) -> TokenArtifact | None:
        assert response_id == "resp_parent"
        prompt, output = array("I", BRANCH[:96]), array("I", BRANCH[96:])
        return TokenArtifact("resp_parent", tenant_id, "fp", prompt, output, ())


def stored(seq: int, blocks: int) -> Batch:
    """The replica stored the branch's first ``blocks`` blocks."""
    tokens = BRANCH[: blocks * BLOCK]
    event = BlocksStored(
        hashes=tuple(seq * 100 + i for i in range(blocks)),
        block_size=BLOCK,
        session_id="sess",
        salt=SALT,
        contents=tuple(content_keys(tokens, BLOCK)),
    )
    return Batch(seq=seq, ts=0.0, events=(event,))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def tracker(clock: Clock) -> ResidencyTracker:
    return ResidencyTracker(["a", "b"], clock=clock)


@pytest.fixture
def book(tracker: ResidencyTracker, clock: Clock) -> PlacementBook:
    return PlacementBook(["a", "b"], eject_seconds=5, residency=tracker, clock=clock)


def placer(book: PlacementBook, tracker: ResidencyTracker) -> RoundPlacer:
    settings = Settings(placement_event_lag_seconds=2.0)
    services = SimpleNamespace(
        settings=settings,
        placement=book,
        residency=tracker,
        replicas={"a": object(), "b": object()},
        artifacts=Artifacts(),
        upstream=object(),
    )
    turn = SimpleNamespace(
        parent=SimpleNamespace(id="resp_parent"),
        lineage=SimpleNamespace(session_id="sess"),
        caller=SimpleNamespace(tenant_id="ten", cache_salt=SALT),
        response_id="resp_new",
    )
    return RoundPlacer.for_turn(cast(Runtime, services), cast(PreparedTurn, turn))


def target_of(round_placer: RoundPlacer) -> tuple[str | None, str, dict[str, int]]:
    target = asyncio.run(round_placer.target())
    assert target.decision is not None
    return target.replica, target.decision.reason, dict(target.decision.resident)


def test_the_longest_resident_prefix_of_the_branch_wins(
    book: PlacementBook, tracker: ResidencyTracker
) -> None:
    tracker.apply("a", stored(0, 2))
    tracker.apply("b", stored(0, 6))
    assert target_of(placer(book, tracker)) == (
        "b",
        "resident_prefix",
        {"a": 2 * BLOCK, "b": 6 * BLOCK},
    )


def test_the_previous_rounds_replica_is_presumed_while_its_events_lag(
    book: PlacementBook, tracker: ResidencyTracker, clock: Clock
) -> None:
    tracker.apply("a", stored(0, 2))  # a shared prefix, seen on a
    tracker.apply("b", stored(0, 1))  # b said its block size, before the parent's round
    clock.now += 1
    # b served the parent (its prompt + output: 8 full blocks and 5 tokens); no event since.
    book.served("resp_parent", "b", len(BRANCH) + 5)
    clock.now += 1
    replica, reason, resident = target_of(placer(book, tracker))
    assert (replica, reason) == ("b", "resident_prefix")
    # Presumed in full blocks, as its events would say it.
    assert resident == {"a": 2 * BLOCK, "b": len(BRANCH)}


def test_no_presumption_past_the_lag(
    book: PlacementBook, tracker: ResidencyTracker, clock: Clock
) -> None:
    tracker.apply("a", stored(0, 2))
    book.served("resp_parent", "b", len(BRANCH))
    clock.now += 3  # past placement_event_lag_seconds: b's silence is not a promise
    assert target_of(placer(book, tracker))[:2] == ("a", "resident_prefix")


def test_no_presumption_once_a_batch_arrived_after_the_round(
    book: PlacementBook, tracker: ResidencyTracker, clock: Clock
) -> None:
    book.served("resp_parent", "b", len(BRANCH))
    clock.now += 0.5
    # b's events since the round ended say what it holds: one block only (an eviction).
    tracker.apply("b", stored(0, 1))
    tracker.apply("a", stored(0, 3))
    assert target_of(placer(book, tracker)) == (
        "a",
        "resident_prefix",
        {"a": 3 * BLOCK, "b": BLOCK},
    )


def test_no_presumption_for_an_ejected_replica(
    book: PlacementBook, tracker: ResidencyTracker, clock: Clock
) -> None:
    book.served("resp_parent", "b", len(BRANCH))
    book.eject("b", "refused")
    replica, reason, resident = target_of(placer(book, tracker))
    assert replica == "a" and resident == {"a": 0, "b": 0}
    assert reason == "home"


def test_nothing_resident_the_previous_rounds_replica_is_home(
    book: PlacementBook, tracker: ResidencyTracker, clock: Clock
) -> None:
    book.served("resp_parent", "b", None)  # the answer said no usage: nothing presumed
    assert target_of(placer(book, tracker)) == ("b", "home", {"a": 0, "b": 0})


def refusals(book: PlacementBook, tracker: ResidencyTracker, *errors: ApiError) -> list[Any]:
    round_placer = placer(book, tracker)
    target: Target | None = asyncio.run(round_placer.target())
    seen: list[Any] = []
    for error in errors:
        assert target is not None
        target = round_placer.after_refusal(target, error)
        decision = None if target is None else target.decision
        seen.append(None if decision is None else (decision.replica, decision.reason))
    return seen


def unreachable() -> UpstreamError:
    return UpstreamError("gone", status_code=502, code="upstream_unreachable")


def test_an_unreachable_replica_is_ejected_and_the_round_fails_over_once(
    book: PlacementBook, tracker: ResidencyTracker
) -> None:
    tracker.apply("b", stored(0, 4))
    assert refusals(book, tracker, unreachable(), unreachable()) == [("a", "failover"), None]
    assert book.ejected() == {"a", "b"}
    # b's residency went with it: nothing is placed on what it held.
    assert {p.replica: p.resident_tokens for p in tracker.prefix(BRANCH, SALT)}["b"] == 0


@pytest.mark.parametrize(
    "error",
    [
        ApiError("bad", status_code=400, code="invalid_value"),
        UpstreamError("ours", status_code=502, code="upstream_authentication_failed"),
        UpstreamInterrupted("lost", code="upstream_stream_interrupted"),
    ],
    ids=["a 4xx", "our credentials", "the model ran"],
)
def test_refusals_another_replica_would_repeat_are_not_retried(
    book: PlacementBook, tracker: ResidencyTracker, error: ApiError
) -> None:
    assert refusals(book, tracker, error) == [None]
    assert book.ejected() == frozenset()


def test_a_5xx_fails_over_without_ejecting(book: PlacementBook, tracker: ResidencyTracker) -> None:
    failed = UpstreamError("boom", status_code=502, code="upstream_error")
    other = "b" if home_of("sess", ["a", "b"]) == "a" else "a"
    assert refusals(book, tracker, failed) == [(other, "failover")]
    assert book.ejected() == frozenset()
