"""The residency map fed with a real vLLM 0.32 KV-event stream (recorded by
scripts/real_vllm/capture_kv_events.py): stores per session with the salt, removals
mapped back to sessions, clears, and every way a stream can go wrong falling on the safe
side (less residency shown, never blocks that are gone)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace
from pathlib import Path

import msgpack
import pytest
from prometheus_client import REGISTRY

from agentic_api.cache.residency.events import (
    Batch,
    BlocksRemoved,
    BlocksStored,
    MalformedBatch,
    decode_frames,
)
from agentic_api.cache.residency.tracker import ResidencyTracker

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kv_events" / "vllm_cpu_0.32.jsonl"
REPLICA = "replica-a"
BLOCK = 32


@dataclass
class Step:
    name: str
    frames: list[list[bytes]]

    @property
    def batches(self) -> list[Batch]:
        return [decode_frames(frames) for frames in self.frames]


def load_steps() -> dict[str, Step]:
    steps: dict[str, Step] = {}
    current: Step | None = None
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "mark" in record:
            current = Step(record["mark"], [])
            steps[current.name] = current
            continue
        assert current is not None
        current.frames.append(
            [
                record["topic"].encode(),
                record["seq"].to_bytes(8, "big"),
                base64.b64decode(record["payload"]),
            ]
        )
    return steps


STEPS = load_steps()
ALL = [batch for step in STEPS.values() for batch in step.batches]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def tracker(**limits: int) -> ResidencyTracker:
    return ResidencyTracker([REPLICA], clock=lambda: 1000.0, **limits)


def feed(target: ResidencyTracker, batches: list[Batch], start: float = 1000.0) -> float:
    now = start
    for batch in batches:
        target.apply(REPLICA, batch, now)
        now += 1.0
    return now


def view(target: ResidencyTracker, session: str):
    (only,) = target.session(session)
    return only


def live_hashes(batches: list[Batch]) -> dict[object, str]:
    """The reference model: every attributed hash stored and not removed since a clear."""
    live: dict[object, str] = {}
    for batch in batches:
        for event in batch.events:
            if isinstance(event, BlocksStored) and event.session_id:
                for h in event.hashes:
                    live.setdefault(h, event.session_id)
            elif isinstance(event, BlocksRemoved):
                for h in event.hashes:
                    live.pop(h, None)
            else:
                live.clear()
    return live


def test_the_fixture_is_a_real_capture_with_every_kind_of_event() -> None:
    kinds = {type(event).__name__ for batch in ALL for event in batch.events}
    assert kinds == {"AllCleared", "BlocksStored", "BlocksRemoved"}
    seqs = [batch.seq for batch in ALL]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_stores_land_under_the_session_with_the_salt_of_its_first_block() -> None:
    target = tracker()
    feed(target, STEPS["turn1"].batches)
    a = view(target, "sess-a")
    assert (a.resident_blocks, a.resident_tokens) == (16, 16 * BLOCK)
    assert a.salts == ("salt-one",)
    assert a.block_size == BLOCK
    # The cache reset before turn 1 is the one reset seen so far.
    assert [reset.reason for reset in a.resets] == ["cleared"]


def test_a_continuation_adds_its_new_blocks_without_a_salt() -> None:
    target = tracker()
    feed(target, STEPS["turn1"].batches + STEPS["turn2"].batches)
    a = view(target, "sess-a")
    # 801-token prompt: 25 full blocks, 16 of them reused from turn 1.
    assert a.resident_blocks == 25
    assert a.salts == ("salt-one",)
    assert len(a.store_times) == 2


def test_another_salt_is_another_tenants_blocks() -> None:
    target = tracker()
    feed(target, STEPS["turn1"].batches + STEPS["turn2"].batches + STEPS["other_salt"].batches)
    b = view(target, "sess-b")
    assert (b.resident_blocks, b.salts) == (16, ("salt-two",))
    assert view(target, "sess-a").resident_blocks == 25
    assert sample("agentic_kv_resident_tokens", replica=REPLICA) == (25 + 16) * BLOCK


def test_reuse_reported_in_full_mode_is_shared_and_counted_once_per_replica() -> None:
    target = tracker()
    feed(
        target,
        [
            b
            for name in ("turn1", "turn2", "other_salt", "full_report")
            for b in STEPS[name].batches
        ],
    )
    c = view(target, "sess-c")
    assert (c.resident_blocks, c.salts) == (16, ("salt-one",))
    # sess-c reused sess-a's first 16 blocks: the replica holds no new ones.
    assert sample("agentic_kv_resident_tokens", replica=REPLICA) == (25 + 16) * BLOCK


def test_duplicate_stores_are_counted_once() -> None:
    target = tracker()
    (turn1,) = STEPS["turn1"].batches
    feed(target, [turn1, replace(turn1, seq=turn1.seq + 1)])
    assert view(target, "sess-a").resident_blocks == 16


def test_pressure_removals_are_evictions_of_the_sessions_that_held_the_blocks() -> None:
    target = tracker()
    before = sample("agentic_kv_unknown_removals_total", replica=REPLICA)
    order = ["turn1", "turn2", "other_salt", "full_report", "pressure"]
    batches = [b for name in order for b in STEPS[name].batches]
    feed(target, batches)
    live = live_hashes(batches)
    # Since the reset every store was seen, so every removal names a known block.
    assert sample("agentic_kv_unknown_removals_total", replica=REPLICA) == before
    assert sample("agentic_kv_resident_tokens", replica=REPLICA) == len(live) * BLOCK
    for session in ("sess-a", "sess-b", "sess-c", *(f"sess-p{i}" for i in range(8))):
        shown = view(target, session)
        assert shown.resident_blocks == sum(1 for s in live.values() if s == session) or (
            session == "sess-c"  # holds sess-a's blocks, which the reference gives to sess-a
        )
    a = view(target, "sess-a")
    assert a.evictions, "sess-a's blocks were removed under pressure"
    assert sum(e.blocks for e in a.evictions) + a.resident_blocks == 25
    assert all(e.tokens == e.blocks * BLOCK for e in a.evictions)


def test_removals_of_hashes_never_seen_change_nothing() -> None:
    # A subscriber that joined late sees removals of blocks stored before it listened.
    target = tracker()
    before = sample("agentic_kv_unknown_removals_total", replica=REPLICA)
    feed(target, STEPS["pressure"].batches)
    removed = sum(
        len(e.hashes)
        for b in STEPS["pressure"].batches
        for e in b.events
        if isinstance(e, BlocksRemoved)
    )
    unknown = sample("agentic_kv_unknown_removals_total", replica=REPLICA) - before
    assert 0 < unknown <= removed
    live = live_hashes(STEPS["pressure"].batches)
    assert sample("agentic_kv_resident_tokens", replica=REPLICA) == len(live) * BLOCK
    assert view(target, "sess-a").resident_blocks == 0


def test_all_blocks_cleared_empties_the_replica() -> None:
    target = tracker()
    feed(target, ALL)
    assert view(target, "sess-a").resident_blocks == 0
    assert view(target, "sess-p7").resident_blocks == 0
    d = view(target, "sess-d")
    assert d.resident_blocks == 6
    assert [r.reason for r in d.resets] == ["cleared", "cleared"]


def test_a_sequence_going_backwards_is_a_restart_and_clears_coverage() -> None:
    target = tracker()
    before = sample("agentic_kv_coverage_resets_total", replica=REPLICA, reason="restart")
    end = feed(target, [b for name in ("turn1", "turn2") for b in STEPS[name].batches])
    assert view(target, "sess-a").resident_blocks == 25
    # The engine restarted: its numbering starts again (here: replayed from the top).
    restarted = [replace(b, seq=i) for i, b in enumerate(STEPS["other_salt"].batches)]
    feed(target, restarted, start=end)
    assert (
        sample("agentic_kv_coverage_resets_total", replica=REPLICA, reason="restart") == before + 1
    )
    assert view(target, "sess-a").resident_blocks == 0
    assert view(target, "sess-b").resident_blocks == 16


def test_a_gap_in_the_sequence_clears_coverage() -> None:
    target = tracker()
    before = sample("agentic_kv_coverage_resets_total", replica=REPLICA, reason="gap")
    turn1, turn2, other = (STEPS[n].batches[0] for n in ("turn1", "turn2", "other_salt"))
    feed(target, [turn1, other])  # turn 2's batch was lost: it may have removed blocks
    assert sample("agentic_kv_coverage_resets_total", replica=REPLICA, reason="gap") == before + 1
    assert view(target, "sess-a").resident_blocks == 0
    assert view(target, "sess-b").resident_blocks == 16
    del turn2


def test_a_lost_publisher_clears_coverage_and_accepts_any_sequence_next() -> None:
    target = tracker()
    feed(target, STEPS["turn1"].batches)
    target.lost(REPLICA, "disconnected", 2000.0)
    a = view(target, "sess-a")
    assert (a.resident_blocks, a.connected) == (0, False)
    feed(target, STEPS["other_salt"].batches, start=2001.0)
    assert view(target, "sess-b").resident_blocks == 16


def test_the_session_limit_forgets_the_least_recently_stored() -> None:
    target = tracker(max_sessions=3)
    before = sample("agentic_kv_residency_dropped_total", replica=REPLICA, what="session")
    feed(
        target,
        [
            b
            for name in ("turn1", "turn2", "other_salt", "full_report", "pressure")
            for b in STEPS[name].batches
        ],
    )
    assert sample("agentic_kv_residency_dropped_total", replica=REPLICA, what="session") > before
    assert view(target, "sess-a").resident_blocks == 0  # forgotten, not shown
    assert sample("agentic_kv_tracked_sessions", replica=REPLICA) == 3


def test_the_block_limit_keeps_the_newest_blocks_of_a_session() -> None:
    target = tracker(max_blocks_per_session=10)
    before = sample("agentic_kv_residency_dropped_total", replica=REPLICA, what="block")
    feed(target, STEPS["turn1"].batches)
    assert view(target, "sess-a").resident_blocks == 10
    assert sample("agentic_kv_residency_dropped_total", replica=REPLICA, what="block") == before + 6
    assert sample("agentic_kv_resident_tokens", replica=REPLICA) == 10 * BLOCK


def test_an_idle_sessions_eviction_is_counted_when_it_resumes() -> None:
    target = tracker()
    idle_before = sample("agentic_kv_sessions_evicted_while_idle_total", replica=REPLICA)
    resumed_before = sample("agentic_kv_evicted_before_resume_total", replica=REPLICA)
    target.turn_started("sess-a", 999.0)
    feed(target, STEPS["turn1"].batches, start=1000.0)
    target.turn_finished("sess-a", 1001.0)
    feed(
        target,
        [b for n in ("turn2", "other_salt", "full_report") for b in STEPS[n].batches],
        start=1002.0,
    )
    feed(target, STEPS["pressure"].batches, start=1061.0)
    (first, *_rest) = view(target, "sess-a").evictions
    assert first.idle_seconds is not None and first.idle_seconds >= 60.0
    assert sample("agentic_kv_sessions_evicted_while_idle_total", replica=REPLICA) > idle_before
    target.turn_started("sess-a", 1200.0)
    assert sample("agentic_kv_evicted_before_resume_total", replica=REPLICA) == resumed_before + 1
    target.turn_finished("sess-a", 1201.0)
    target.turn_started("sess-a", 1300.0)  # nothing evicted since: not counted again
    assert sample("agentic_kv_evicted_before_resume_total", replica=REPLICA) == resumed_before + 1


def test_an_eviction_during_a_running_turn_is_not_idle() -> None:
    target = tracker()
    batches = [b for n in ("turn1", "turn2", "pressure") for b in STEPS[n].batches]
    # Without the steps in between: renumbered, or the jump would read as lost batches.
    batches = [replace(b, seq=i) for i, b in enumerate(batches)]
    feed(target, batches[:2])
    target.turn_started("sess-a", 1500.0)
    feed(target, batches[2:], start=1501.0)
    evictions = view(target, "sess-a").evictions
    assert evictions and all(e.idle_seconds is None for e in evictions)


@pytest.mark.parametrize(
    "frames",
    [
        [b"kv", b"\x00" * 8],
        [b"kv", b"\x00" * 7, b"\x90"],
        [b"kv", b"\x00" * 8, b"\xc1"],
        [b"kv", b"\x00" * 8, msgpack.packb({"ts": 1})],
        [b"kv", b"\x00" * 8, msgpack.packb([1.0, [{"type": "BlockRemoved", "block_hashes": "x"}]])],
    ],
)
def test_unreadable_batches_are_refused(frames: list[bytes]) -> None:
    with pytest.raises(MalformedBatch):
        decode_frames(frames)


def test_unknown_kinds_other_media_and_groups_are_skipped() -> None:
    events = [
        {"type": "SomethingNew", "x": 1},
        {
            "type": "BlockStored",
            "block_hashes": [1],
            "block_size": 32,
            "medium": "CPU",
            "session_id": "s",
        },
        {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU", "group_idx": 1},
    ]
    batch = decode_frames([b"kv", (5).to_bytes(8, "big"), msgpack.packb([1.0, events])])
    assert (batch.seq, batch.events) == (5, ())


def test_each_batch_observes_its_lag_from_the_engines_timestamp() -> None:
    replica = "replica-lag"
    target = ResidencyTracker([replica], clock=lambda: 1000.0)
    first = replace(STEPS["turn1"].batches[0], ts=1000.0)
    late = replace(first, seq=first.seq + 1, ts=1001.0)
    count = sample("agentic_kv_event_lag_seconds_count", replica=replica)
    total = sample("agentic_kv_event_lag_seconds_sum", replica=replica)
    target.apply(replica, first, 1000.25)
    target.apply(replica, late, 1003.5)
    assert sample("agentic_kv_event_lag_seconds_count", replica=replica) == count + 2
    assert sample("agentic_kv_event_lag_seconds_sum", replica=replica) == total + 0.25 + 2.5
    # An engine clock ahead of ours is no negative lag.
    target.apply(replica, replace(late, seq=late.seq + 1, ts=2000.0), 1004.0)
    assert sample("agentic_kv_event_lag_seconds_sum", replica=replica) == total + 2.75
    assert sample("agentic_kv_event_lag_seconds_bucket", replica=replica, le="0.25") >= 2
