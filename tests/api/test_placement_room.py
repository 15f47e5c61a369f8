"""Placement weighs KV room (``cache/placement.py``'s claims, on SQLite and PostgreSQL):
simulators that state their cache's size on ``/metrics`` as vLLM does
(``num_gpu_blocks``), our server placing on them. Sessions starting together spread over
the replicas by room; a session whose replica has no room for it, holding there only the
prefix every session shares, moves to the replica with room and stays warm there."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.placement import BLOCK, placing_gateway, served, wait_probed, words
from tests.support.waiting import eventually
from tests.upstream_sim import SimServer

# Each replica's prefix cache: 40 blocks of 16 tokens. A session here is ~330 tokens (~20
# blocks, 8 of them the prefix every session shares), so one replica never holds three.
CAPACITY_BLOCKS = 40
SHARED = "You are one of a team of agents. " + words("rule", 40)


@pytest.fixture
def small_sims(backend: str) -> Iterator[list[SimServer]]:
    folder = Path(tempfile.mkdtemp(prefix="pr-"))  # ipc:// paths must stay short
    sims = [
        SimServer(
            block_size=BLOCK,
            cache_capacity_blocks=CAPACITY_BLOCKS,
            reports_kv_capacity=True,
            kv_events_endpoint=f"ipc://{folder}/{i}.ipc",
            kv_events_topic=f"room-{backend}-{i}-{time.monotonic_ns()}",
        ).start()
        for i in range(2)
    ]
    try:
        yield sims
    finally:
        for sim in sims:
            sim.stop()
        shutil.rmtree(folder, ignore_errors=True)


def own_names() -> list[str]:
    stamp = time.monotonic_ns()
    return [f"room{i}-{stamp}" for i in range(2)]


def test_sessions_starting_together_spread_by_room(
    backend: str, fresh_db: str, small_sims: list[SimServer], tmp_path: Path
) -> None:
    names = own_names()
    with placing_gateway(backend, fresh_db, small_sims, names, tmp_path) as gateway:
        for sim in small_sims:
            wait_probed(sim)
        conversations = [gateway.client.conversations.create() for _ in range(4)]
        for index, conversation in enumerate(conversations):
            gateway.turn(conversation, words(f"task{index}-", 60), instructions=SHARED)
        homes = [gateway.placements(c)[0] for c in conversations]
        assert [h["reason"] for h in homes] == ["home"] * 4
        # Each second session goes where the first of its pair is not: the fewest tokens
        # claimed (a hash alone would split the pairs so a quarter of the time).
        assert homes[0]["replica"] != homes[1]["replica"]
        assert homes[2]["replica"] != homes[3]["replica"]
        for name, sim in zip(names, small_sims, strict=True):
            placed_here = [
                c for c, h in zip(conversations, homes, strict=True) if h["replica"] == name
            ]
            assert [served(sim, c.id) for c in placed_here] == [1, 1]


def test_a_session_without_room_moves_where_it_fits_and_stays(
    backend: str, fresh_db: str, small_sims: list[SimServer], tmp_path: Path
) -> None:
    names = own_names()
    full, roomy = small_sims
    with placing_gateway(backend, fresh_db, small_sims, names, tmp_path) as gateway:
        # The second replica saturated while three sessions start: all three spill to the
        # first, which holds one of them (and the prefix they share).
        roomy.state.load = (9.0, 0.5)
        wait_probed(roomy)
        wait_probed(full)
        conversations = [gateway.client.conversations.create() for _ in range(3)]
        firsts = [
            gateway.turn(c, words(f"task{i}-", 55), instructions=SHARED)
            for i, c in enumerate(conversations)
        ]
        assert [served(full, c.id) for c in conversations] == [1, 1, 1]
        first = conversations[0]
        # The oldest session's own blocks are evicted there; the shared prefix is not.
        eventually(
            lambda: 0 < gateway.resident_on(firsts[0].id, names[0]) < 200,
            "only the shared prefix of the first session resident",
        )
        roomy.state.load = (0.0, 0.1)
        wait_probed(roomy)
        moved = gateway.turn(first, "and then?", instructions=SHARED)
        decision = gateway.placements(first)[-1]
        assert (decision["replica"], decision["reason"]) == (names[1], "capacity")
        assert served(roomy, first.id) == 1
        assert moved.usage is not None
        gateway.wait_resident(moved.id, names[1])
        # Where it fits, it stays, and its prefix is found.
        last = gateway.turn(first, "and after that?", instructions=SHARED)
        assert gateway.placements(first)[-1]["reason"] == "resident_prefix"
        assert served(roomy, first.id) == 2
        assert last.usage is not None and last.usage.input_tokens_details.cached_tokens > 0
