"""The residency pieces around the map: endpoint settings and who binds, what upstream
bodies carry for the events, the miss attribution's causes, and the subscriber against a
publisher speaking vLLM's format (including an unreadable batch and a bind that waits)."""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentic_api.app import _kv_event_endpoints
from agentic_api.cache.residency.attribution import expected_cached, explain_miss
from agentic_api.cache.residency.endpoints import (
    Endpoint,
    EndpointError,
    parse_endpoint,
    parse_endpoints,
)
from agentic_api.cache.residency.events import Batch, BlocksStored
from agentic_api.cache.residency.replica import Eviction, Reset
from agentic_api.cache.residency.subscriber import KvEventSubscriber
from agentic_api.cache.residency.tags import SessionTags
from agentic_api.cache.residency.tracker import ResidencyTracker, SessionOnReplica
from agentic_api.operator.handlers.admin.residency import annotate_timeline
from agentic_api.operator.handlers.admin.timeline import present_timeline
from agentic_api.operator.queries.admin import TurnRecord
from agentic_api.settings import ConfigError, Settings
from tests.upstream_sim.kv_events import KvEventPublisher, stored


def test_endpoints_come_as_pairs_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTIC_KV_EVENTS_ENDPOINTS", "a=ipc:///tmp/a.ipc, b=tcp://127.0.0.1:5557")
    assert Settings().kv_events_endpoints == {"a": "ipc:///tmp/a.ipc", "b": "tcp://127.0.0.1:5557"}
    monkeypatch.setenv("AGENTIC_KV_EVENTS_ENDPOINTS", '{"a": "connect:tcp://10.0.0.2:5557"}')
    assert Settings().kv_events_endpoints == {"a": "connect:tcp://10.0.0.2:5557"}
    monkeypatch.setenv("AGENTIC_KV_EVENTS_ENDPOINTS", "no-equals-sign")
    with pytest.raises(ValueError):
        Settings()


def test_who_binds_mirrors_vllm() -> None:
    assert parse_endpoint("a", "ipc:///x").mode == "connect"  # vLLM binds ipc
    assert parse_endpoint("a", "tcp://127.0.0.1:5557").mode == "bind"  # vLLM connects
    assert parse_endpoint("a", "connect:tcp://10.0.0.2:5557") == Endpoint(
        "a", "tcp://10.0.0.2:5557", "connect"
    )
    assert parse_endpoint("a", "bind:ipc:///x").mode == "bind"
    for bad in ("tcp://*:5557", "tcp://0.0.0.0:5557", "http://x", "5557"):
        with pytest.raises(EndpointError):
            parse_endpoint("a", bad)
    with pytest.raises(EndpointError):
        parse_endpoints({"a": "ipc:///x", "b": "ipc:///x"})


def test_a_bad_endpoint_is_a_configuration_error() -> None:
    settings = Settings(kv_events_endpoints={"a": "tcp://*:1"})
    with pytest.raises(ConfigError, match="AGENTIC_KV_EVENTS_ENDPOINTS"):
        _kv_event_endpoints(settings)


def test_tags_put_the_session_in_the_body_and_merge_the_report_mode() -> None:
    fields = {"session_id": "client-chosen", "vllm_xargs": {"other": 1}}
    SessionTags().apply(fields, "conv_1")
    assert fields == {"session_id": "conv_1", "vllm_xargs": {"other": 1}}
    SessionTags(in_body=False, report_reuse=True).apply(fields, "conv_2")
    assert fields["session_id"] == "conv_1"
    assert fields["vllm_xargs"] == {"other": 1, "kv_cache_report_mode": "full"}


def view(
    replica: str,
    *,
    stores: tuple[float, ...] = (),
    evictions: tuple[Eviction, ...] = (),
    resets: tuple[Reset, ...] = (),
) -> SessionOnReplica:
    return SessionOnReplica(replica, True, 0.0, 32, 0, 0, None, None, (), stores, evictions, resets)


def test_expected_is_every_full_block_of_the_previous_prompt_capped() -> None:
    assert expected_cached(700, 900, 32) == 672
    assert expected_cached(700, 673, 32) == 672  # 673 - 1 = 672: all of it
    assert expected_cached(700, 672, 32) == 640  # the last prompt token is recomputed


def test_causes_in_order_eviction_reset_other_replica_not_seen() -> None:
    window = {"previous_started": 100.0, "started": 200.0, "next_started": 300.0}
    eviction = Eviction(at=150.0, blocks=4, tokens=128, idle_seconds=45.0)
    assert explain_miss([view("a")], expected=64, measured=64, **window) is None
    found = explain_miss(
        [view("a", evictions=(eviction,)), view("b", resets=(Reset(160.0, "restart", 9),))],
        expected=640,
        measured=512,
        **window,
    )
    assert found is not None and (found.cause, found.replica) == ("evicted", "a")
    assert "evicted 4 blocks (128 tokens)" in found.explanation and "idle 45 s" in found.explanation
    early = Eviction(at=50.0, blocks=4, tokens=128, idle_seconds=1.0)  # before the window
    found = explain_miss(
        [view("a", evictions=(early,)), view("b", resets=(Reset(160.0, "restart", 9),))],
        expected=640,
        measured=0,
        **window,
    )
    assert found is not None and (found.cause, found.replica) == ("replica_reset", "b")
    found = explain_miss(
        [view("a", stores=(110.0,)), view("b", stores=(210.0,))], expected=640, measured=0, **window
    )
    assert found is not None and (found.cause, found.replica) == ("other_replica", "b")
    found = explain_miss([view("a", stores=(110.0, 210.0))], expected=640, measured=0, **window)
    assert found is not None and found.cause == "not_seen" and found.replica is None


def wait(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.02)


def test_the_subscriber_follows_a_publisher_and_drops_an_unreadable_batch() -> None:
    folder = Path(tempfile.mkdtemp(prefix="kvu-"))
    endpoint = f"ipc://{folder}/a.ipc"
    tracker = ResidencyTracker(["a"])
    subscriber = KvEventSubscriber(tracker, [Endpoint("a", endpoint, "connect")])
    publisher = KvEventPublisher(endpoint, "a")
    subscriber.start()
    try:

        def resident() -> int:
            return tracker.session("s")[0].resident_blocks

        def send_store() -> bool:
            publisher.publish([stored([1, 2, 3], None, [0] * 96, 32, "salt", "s")])
            return resident() == 3

        wait(send_store)  # resent until the subscription has reached the publisher
        publisher.send_raw([b"a", (99).to_bytes(8, "big"), b"\xc1"])  # not msgpack
        wait(lambda: resident() == 0)
        assert tracker.session("s")[0].resets[-1].reason == "malformed"
    finally:
        subscriber.stop()
        publisher.close()


def test_a_taken_tcp_address_is_retried_until_it_is_free() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    holder.listen()
    tracker = ResidencyTracker(["a"])
    subscriber = KvEventSubscriber(
        tracker, [Endpoint("a", f"tcp://127.0.0.1:{port}", "bind")], retry_seconds=0.1
    )
    subscriber.start()
    try:
        time.sleep(0.3)
        assert not subscriber.ready.is_set()
        holder.close()
        assert subscriber.ready.wait(5)
        # vLLM, given a tcp address with a host, connects to us.
        publisher = KvEventPublisher(f"tcp://127.0.0.1:{port}", "a")
        try:

            def send_store() -> bool:
                publisher.publish([stored([7], None, [0] * 32, 32, None, "s")])
                return tracker.session("s")[0].resident_blocks == 1

            wait(send_store)
        finally:
            publisher.close()
    finally:
        subscriber.stop()
        holder.close()


def turn_record(
    response_id: str,
    at: float,
    *,
    input_tokens: int,
    cached: int,
    output_tokens: int,
    parent: str | None = None,
    account: dict[str, Any] | None = None,
) -> TurnRecord:
    return TurnRecord(
        id=response_id,
        tenant_id="tenant",
        conversation_id="conv_a",
        previous_response_id=parent,
        session_id="conv_a",
        depth=0 if parent is None else 1,
        status="completed",
        model="m",
        created_at=datetime.fromtimestamp(at, UTC),
        deleted_at=None,
        input_tokens=input_tokens,
        cached_tokens=cached,
        output_tokens=output_tokens,
        fingerprint={},
        fingerprint_digest="f",
        fingerprint_changes=[],
        salt_epoch=0,
        prefix_digest="d",
        history_item_count=2 if parent is None else 4,
        input_item_count=1,
        output_item_count=1,
        conversation_position=0 if parent is None else 2,
        token_account=account,
    )


def test_the_timelines_expected_figure_is_the_token_accounts() -> None:
    tracker = ResidencyTracker(["a"])
    tracker.apply("a", Batch(0, 0.0, (BlocksStored((1, 2), 32, "conv_a", "salt"),)), 0.0)
    first = turn_record("resp_1", 100.0, input_tokens=700, cached=0, output_tokens=40)
    # 700 + 40 tokens replayed exactly: 23 full blocks (736) of the 739 with KV.
    account = {"status": "exact", "parent_id": "resp_1", "expected_cached": 736}
    second = turn_record(
        "resp_2", 200.0, input_tokens=900, cached=704, output_tokens=4, account=account
    )
    rows = [first, second]
    shown = present_timeline(rows, None)
    annotate_timeline(shown, rows, None, tracker)
    # 704 is more than every full block of the previous prompt (672) but one block short
    # of the account's 736: the same figure the account's not_resident loss comes from.
    cause = shown[1].residency
    assert cause is not None
    assert (cause.expected_cached_tokens, cause.measured_cached_tokens) == (736, 704)
    assert cause.cause == "not_seen"

    # Without an account (no token ids), every full block of the previous prompt.
    bare = replace(second, token_account=None)
    shown = present_timeline([first, bare], None)
    annotate_timeline(shown, [first, bare], None, tracker)
    assert shown[1].residency is None
