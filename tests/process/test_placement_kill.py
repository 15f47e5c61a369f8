"""A replica killed mid-run (SIGKILL, a real process) behind the gateway's own placement
(``AGENTIC_UPSTREAM_REPLICAS``), on SQLite and PostgreSQL: two simulator processes
publishing KV events, four agents (two homed on each), every second turn streaming when
one replica dies. Only the rounds in flight on it are lost (their streams had sent bytes:
stored as failed, never retried); the other replica's finish; the next round of a session
that lived on the dead one fails over (nothing had been sent) or, once the replica is
ejected, goes straight to the survivor, and every session continues from its last
checkpoint."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from openai.types.conversations import Conversation

from tests.conftest import app_server
from tests.support.tenants import create_tenant
from tests.support.waiting import metric, wait_healthy

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]


class SimProcess:
    """``python -m tests.upstream_sim`` as a process of its own, to be SIGKILLed."""

    def __init__(self, endpoint: str, topic: str) -> None:
        self.endpoint = endpoint
        self.popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.upstream_sim",
                "--port",
                "0",
                "--block-size",
                "16",
                "--cache-capacity-blocks",
                "400",
                # Streams long enough to be caught in flight: 60 tokens, 30 ms each.
                "--default-reply-tokens",
                "60",
                "--decode-seconds-per-token",
                "0.03",
                "--kv-events-endpoint",
                endpoint,
                "--kv-events-topic",
                topic,
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.popen.stdout is not None
        found = re.search(r"http://\S+", self.popen.stdout.readline())
        assert found is not None, "the simulator printed no URL"
        self.url = found.group(0)
        wait_healthy(self.url)

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)

    def sessions(self) -> list[str]:
        """The session of every /v1/responses request it was sent."""
        recorded = httpx.get(f"{self.url}/_sim/requests", timeout=5).json()
        return [r["json"].get("session_id") for r in recorded if r["path"] == "/v1/responses"]


@contextmanager
def sim_processes(count: int, tag: str) -> Iterator[list[SimProcess]]:
    folder = Path(tempfile.mkdtemp(prefix="pk-"))
    sims: list[SimProcess] = []
    try:
        for i in range(count):
            sims.append(SimProcess(f"ipc://{folder}/{i}.ipc", f"{tag}-{i}"))
        yield sims
    finally:
        for sim in sims:
            sim.kill()
            if sim.popen.stdout is not None:
                sim.popen.stdout.close()
        shutil.rmtree(folder, ignore_errors=True)


class StreamedTurn(threading.Thread):
    """One streamed turn on its own thread: its event types, and whether text came."""

    def __init__(self, client: OpenAI, conversation: Conversation, text: str) -> None:
        super().__init__(daemon=True)
        self.client, self.conversation, self.text = client, conversation, text
        self.types: list[str] = []
        self.texting = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            stream: Any = self.client.responses.create(
                model="sim-model", conversation=self.conversation.id, input=self.text, stream=True
            )
            for event in stream:
                self.types.append(event.type)
                if event.type == "response.output_text.delta":
                    self.texting.set()
        except BaseException as exc:  # the test reads it
            self.error = exc

    @property
    def outcome(self) -> str | None:
        ends = [t for t in self.types if t in ("response.completed", "response.failed")]
        return ends[-1].removeprefix("response.") if ends else None


def test_a_killed_replica_costs_only_its_rounds_in_flight(
    backend: str, fresh_db: str, tmp_path: Path
) -> None:
    stamp = time.monotonic_ns()
    names = [f"k0-{stamp}", f"k1-{stamp}"]
    with sim_processes(2, f"pk-{backend}") as (doomed, survivor):
        settings = {
            "upstream_replicas": {names[0]: doomed.url, names[1]: survivor.url},
            "kv_events_endpoints": {
                names[0]: doomed.endpoint,
                names[1]: survivor.endpoint,
            },
            # The rounds, not the probe, find the replica gone.
            "placement_probe_seconds": 60,
        }
        with app_server(backend, fresh_db, survivor.url, tmp_path, **settings) as server:
            client = server.client(create_tenant(server.db_url), timeout=30)
            started = [client.conversations.create() for _ in range(4)]
            firsts = [StreamedTurn(client, c, f"task for {c.id}") for c in started]
            for first in firsts:
                first.start()
            for first in firsts:
                first.join(30)
            assert [f.outcome for f in firsts] == ["completed"] * 4
            # Four sessions starting together spread two and two (their claims, not
            # their hashes, decide their homes).
            doomed_sessions = set(doomed.sessions())
            on_doomed = [c for c in started if c.id in doomed_sessions]
            on_survivor = [c for c in started if c.id not in doomed_sessions]
            assert len(on_doomed) == len(on_survivor) == 2
            everyone = on_doomed + on_survivor

            seconds = [StreamedTurn(client, c, "the next step") for c in everyone]
            for second in seconds:
                second.start()
            for second in seconds:
                assert second.texting.wait(30), "a stream sent no text"
            doomed.kill()
            for second in seconds:
                second.join(30)
                assert not second.is_alive()
            # Only the rounds in flight on the killed replica are lost: their streams had
            # sent text, so they end failed (stored), never retried elsewhere.
            assert [s.outcome for s in seconds] == ["failed", "failed", "completed", "completed"]
            assert metric("agentic_placements_total", replica=names[1], reason="failover") == 0

            # Each session continues from its last checkpoint; the first round sent to
            # the dead replica is refused before any byte: it fails over, once, and the
            # replica is ejected, so the next goes straight to the survivor.
            thirds = [StreamedTurn(client, c, "try again") for c in everyone]
            for third in thirds:
                third.start()
                third.join(30)
            assert [t.outcome for t in thirds] == ["completed"] * 4
            assert metric("agentic_replica_ejections_total", replica=names[0], cause="refused") == 1
            assert metric("agentic_placements_total", replica=names[1], reason="failover") == 1
            survivor_sessions = survivor.sessions()
            for conversation in on_doomed:
                assert survivor_sessions.count(conversation.id) == 1
            for conversation in on_survivor:
                assert survivor_sessions.count(conversation.id) == 3
            for conversation in everyone:
                items = client.conversations.items.list(conversation.id, order="asc").data
                # Turn 1 and turn 3, or all three turns: a message in, a message out each.
                turns = 2 if conversation in on_doomed else 3
                assert len(items) == 2 * turns
