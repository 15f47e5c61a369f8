"""Keep paused agents warm against a real vLLM (CPU, tiny random Llama) with a KV cache of
2,048 tokens (``--max-model-len 1024``: the smallest cache it starts with is the model
length plus a block), its KV events on an ipc:// endpoint and its /metrics read for the
pressure and capacity bounds.

An agent's turn offers tools and pauses (``pause_on=tools_offered``: the tiny random model
answers a tool step in text); another tenant's prompts push its blocks out of the cache; the
keep-warm loop sees the drop in the replica's KV events and re-warms the paused prefix; the
agent's return then finds every full block of the paused prompt cached (vLLM's own
``cached_tokens``), and the timeline's record of the re-warm says it paid off.

The module starts (and stops) its own replica, PostgreSQL only, as the other KV-event
modules do (``kv_db_url`` in conftest.py: residency and keep-warm live in memory, and their
admin queries run on both backends in the api tier).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.conftest import RunningServer, app_server
from tests.real_vllm.test_kv_residency import BLOCK, Replica, text
from tests.support import waiting
from tests.support.servers import free_port
from tests.support.tenants import create_admin_key, create_tenant
from tests.support.typed import usage_of
from tests.support.waiting import metric

pytestmark = pytest.mark.real_vllm

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "real_vllm"
NAME = "kw-replica"
TOOLS: Any = [
    {
        "type": "function",
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        "strict": False,
    }
]


@pytest.fixture(scope="module")
def replica() -> Iterator[Replica]:
    subprocess.run([str(SCRIPTS / "setup.sh")], check=True, stdout=subprocess.DEVNULL)
    folder = Path(tempfile.mkdtemp(prefix="kwr-"))  # ipc:// paths must stay short
    started = Replica(NAME, free_port(), f"ipc://{folder}/{NAME}.ipc")
    try:
        started.start()
        yield started
    finally:
        started.stop()
        shutil.rmtree(folder, ignore_errors=True)


def keep_warm_server(
    db_url: str, replica: Replica, data_dir: Path, keep_warm: bool = True
) -> AbstractContextManager[RunningServer]:
    """Our server reading the replica's KV events and /metrics; keep-warm on (a turn that
    offers tools pauses) unless ``keep_warm`` is false."""
    return app_server(
        "postgres",
        db_url,
        replica.url,
        data_dir,
        kv_events_endpoints={NAME: replica.endpoint},
        keep_warm_enabled=keep_warm,
        keep_warm_pause_on="tools_offered",
        keep_warm_interval_seconds=0.1,
        keep_warm_replica_metrics={NAME: f"{replica.url}/metrics"},
    )


@pytest.fixture(scope="module")
def server(
    kv_db_url: str, replica: Replica, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    with keep_warm_server(kv_db_url, replica, tmp_path_factory.mktemp("kw-real")) as running:
        yield running


def eventually(check: Callable[[], bool], what: str) -> None:
    # A real engine on a shared CPU: a minute, not the api tier's 15 s.
    waiting.eventually(check, what, seconds=60)


def ask(client: OpenAI, words: str, **extra: Any) -> Any:
    return client.responses.create(
        model="tiny-llama", input=words, temperature=0, max_output_tokens=4, **extra
    )


def full_blocks(tokens: int) -> int:
    return tokens // BLOCK * BLOCK


def admin_client(server: RunningServer) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.url}/admin/v1",
        headers={"Authorization": f"Bearer {create_admin_key(server.db_url)}"},
        timeout=30,
    )


def evict_until_rewarmed(others: OpenAI, rewarmed: Callable[[], bool], tag: str) -> int:
    """Other agents (no tools: they do not pause) fill the cache, one prompt at a time,
    until the keep-warm loop has seen the paused prefix drop and re-warmed it; how many
    prompts that took."""
    sent = 0
    while not rewarmed():
        assert sent < 12, "the paused prefix was never re-warmed"
        ask(others, text(f"{tag}{sent}{uuid.uuid4().hex[:4]}", 160))
        sent += 1
        time.sleep(0.5)
    return sent


def test_a_paused_agent_evicted_by_other_traffic_is_rewarmed_and_returns_warm(
    server: RunningServer,
) -> None:
    paid_before = metric("agentic_keep_warm_rewarms_total", outcome="paid_off")
    tokens_before = metric("agentic_keep_warm_tokens_total")
    client = server.client(create_tenant(server.db_url), timeout=120)
    others = server.client(create_tenant(server.db_url), timeout=120)
    admin = admin_client(server)

    def resident() -> int:
        view = admin.get(f"/responses/{paused.id}/residency").json()
        return sum(r["resident_tokens"] for r in view["replicas"] if r["replica"] == NAME)

    def records() -> list[dict[str, Any]]:
        lineage = admin.get(f"/responses/{paused.id}/lineage").json()
        found: list[dict[str, Any]] = lineage["ancestors"][0]["rewarms"]
        return found

    with admin:
        # ~440 tokens with the tools: about a fifth of the cache, well inside its capacity share.
        paused = ask(client, text(f"kw{uuid.uuid4().hex[:6]}", 110), tools=TOOLS)
        paused_prompt = usage_of(paused).input_tokens
        eventually(lambda: resident() >= full_blocks(paused_prompt), "the paused prefix")
        time.sleep(0.5)  # a few of the loop's ticks: it has seen the prefix resident
        sent = evict_until_rewarmed(others, lambda: bool(records()), "o")
        assert sent >= 2, "evicted before other traffic filled the cache"
        eventually(lambda: records()[0]["outcome"] == "done", "the re-warm answered")
        (rewarm,) = records()
        assert rewarm["reason"] == "evicted while paused" and rewarm["replica"] == NAME
        # It was re-warmed because its prefix had gone, and it prefilled what had gone.
        assert rewarm["resident_before"] is not None
        assert rewarm["resident_before"] < full_blocks(paused_prompt)
        assert rewarm["pressure_checked"] is True
        assert rewarm["spent_tokens"] > 0
        assert rewarm["input_tokens"] > paused_prompt
        eventually(lambda: resident() >= full_blocks(paused_prompt), "the prefix back")

        back = ask(client, text("the tool said", 20), tools=TOOLS, previous_response_id=paused.id)
        cached = usage_of(back).input_tokens_details.cached_tokens
        assert cached >= full_blocks(paused_prompt) > 0
        (settled,) = records()
        assert settled["outcome"] == "paid_off"
        assert settled["next_cached_tokens"] == cached
    assert metric("agentic_keep_warm_rewarms_total", outcome="paid_off") == paid_before + 1
    assert metric("agentic_keep_warm_tokens_total") == tokens_before + settled["spent_tokens"]


def test_after_a_restart_a_paused_prefix_cached_before_is_still_kept_warm(
    kv_db_url: str, replica: Replica, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 38, item 16: the agent's first turn ran on a server process that is gone; its
    next turn, on the new one, was served that turn's blocks (reported to the old process
    only) and paused. The new process rebuilds the paused prefix from that turn, sees it
    drop under other traffic, and re-warms it (before: it read 0 and never did)."""
    tenant = create_tenant(kv_db_url)
    tag = uuid.uuid4().hex[:6]

    def serve(keep_warm: bool) -> AbstractContextManager[RunningServer]:
        return keep_warm_server(
            kv_db_url, replica, tmp_path_factory.mktemp("kw-restart"), keep_warm
        )

    with serve(keep_warm=False) as before:
        first = ask(before.client(tenant, timeout=120), text(f"kwr{tag}", 70), tools=TOOLS)

    with serve(keep_warm=True) as after:
        client = after.client(tenant, timeout=120)
        others = after.client(create_tenant(kv_db_url), timeout=120)
        admin = admin_client(after)

        def branch() -> Any:
            view = admin.get(f"/responses/{paused.id}/residency").json()["branch"]
            return view["resident_tokens"]

        def records() -> list[dict[str, Any]]:
            lineage = admin.get(f"/responses/{paused.id}/lineage").json()
            # Root first, ending with the paused turn, whose continuation was warmed.
            found: list[dict[str, Any]] = lineage["ancestors"][-1]["rewarms"]
            return found

        with admin:
            paused = ask(client, text(f"kwr2{tag}", 40), tools=TOOLS, previous_response_id=first.id)
            served = usage_of(paused).input_tokens_details.cached_tokens
            assert served >= full_blocks(usage_of(first).input_tokens) > 0
            paused_prompt = usage_of(paused).input_tokens
            # Rebuilt from the paused turn itself: its whole prompt is known resident.
            eventually(lambda: (branch() or 0) >= full_blocks(paused_prompt), "the paused prefix")
            time.sleep(0.5)  # a few of the loop's ticks: it has seen the prefix resident
            evict_until_rewarmed(others, lambda: bool(records()), "r")
            eventually(lambda: records()[0]["outcome"] == "done", "the re-warm answered")
            (rewarm,) = records()
            assert rewarm["reason"] == "evicted while paused" and rewarm["replica"] == NAME
            back = ask(
                client, text("the tool said", 20), tools=TOOLS, previous_response_id=paused.id
            )
            cached = usage_of(back).input_tokens_details.cached_tokens
            assert cached >= full_blocks(paused_prompt)
            assert records()[0]["outcome"] == "paid_off"
