"""`agentic-api serve` lists the same metric families of ours with one worker and with
two, before any turn: an ``absent()`` alert must not depend on the worker count."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.processes import START_TIMEOUT_SECONDS, Process, process_env
from tests.upstream_sim import SimServer

# Each starts real servers: seconds apiece.
pytestmark = pytest.mark.slow


def _families_before_traffic(env: dict[str, str], workers: str) -> dict[str, str]:
    """Our families (``agentic_*``) and their types, as a fresh server's first scrape
    lists them."""
    server = Process(env, "serve", "--workers", workers)
    try:
        # The machine running the tests may be loaded: two workers start slowly.
        server.wait_up(timeout=START_TIMEOUT_SECONDS * 3)
        text = httpx.get(f"{server.url}/metrics", timeout=30).text
    finally:
        server.stop()
    # The TYPE lines: a family is listed even while it has no sample.
    typed = (line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    # ``*_created``: prometheus-client's per-series creation time, which one process
    # writes for the series it has and the multiprocess files never keep.
    return {
        name: kind
        for name, kind in typed
        if name.startswith("agentic_") and not name.endswith("_created")
    }


def test_one_worker_and_two_list_the_same_families_from_start_up(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    one = _families_before_traffic(process_env(fresh_db, sim.url, tmp_path / "one"), "1")
    two = _families_before_traffic(process_env(fresh_db, sim.url, tmp_path / "two"), "2")
    # The families no turn has touched yet, the ones alerts look for first among them.
    for name in ("agentic_cached_tokens_total", "agentic_token_lost_tokens_total"):
        assert name in one
    assert two == one
