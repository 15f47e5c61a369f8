"""How many HTTP workers `serve` runs: ``AGENTIC_HTTP_WORKERS`` parsing, what ``auto``
picks (CPUs, the cap, a bound KV-event endpoint) and the CPUs a process may use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentic_api.cache.residency.endpoints import parse_endpoints
from agentic_api.serve_workers import (
    AUTO_MAX_WORKERS,
    AUTO_SEVERAL_FROM_CPUS,
    available_cpus,
    plan_workers,
)
from agentic_api.settings import Settings


def test_the_default_is_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTIC_HTTP_WORKERS", raising=False)
    assert Settings().http_workers == "auto"


@pytest.mark.parametrize(
    ("text", "expected"), [("auto", "auto"), (" AUTO ", "auto"), ("1", 1), (" 12 ", 12)]
)
def test_the_environment_takes_auto_or_a_count(
    monkeypatch: pytest.MonkeyPatch, text: str, expected: int | str
) -> None:
    monkeypatch.setenv("AGENTIC_HTTP_WORKERS", text)
    assert Settings().http_workers == expected


@pytest.mark.parametrize("text", ["0", "-1", "2.5", "+3", "two", "", "\u0663", "true"])
def test_anything_else_is_refused_with_one_clear_message(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv("AGENTIC_HTTP_WORKERS", text)
    with pytest.raises(ValidationError) as caught:
        Settings()
    errors = caught.value.errors()
    assert len(errors) == 1 and errors[0]["loc"] == ("http_workers",)
    assert "expected auto or a positive integer" in errors[0]["msg"]


@pytest.mark.parametrize("value", [0, -2, True, 1.5])
def test_python_values_are_checked_too(value: object) -> None:
    with pytest.raises(ValidationError):
        Settings(http_workers=value)


@pytest.mark.parametrize(("cpus", "expected"), [(4, 4), (8, 8), (64, AUTO_MAX_WORKERS)])
def test_auto_runs_one_worker_per_cpu_up_to_the_cap(cpus: int, expected: int) -> None:
    plan = plan_workers("auto", [], cpus)
    assert plan.count == expected and plan.warning is None
    assert f"{cpus} CPU(s)" in plan.reason
    assert ("capped" in plan.reason) == (cpus > AUTO_MAX_WORKERS)


@pytest.mark.parametrize("cpus", [1, 2, AUTO_SEVERAL_FROM_CPUS - 1])
def test_auto_runs_one_worker_on_a_small_machine(cpus: int) -> None:
    plan = plan_workers("auto", [], cpus)
    assert plan.count == 1 and plan.warning is None
    assert f"{cpus} CPU(s) available, fewer than {AUTO_SEVERAL_FROM_CPUS}" in plan.reason


@pytest.mark.parametrize(
    "spec", ["tcp://127.0.0.1:5557", "bind:tcp://127.0.0.1:5557", "bind:ipc:///tmp/kv-a"]
)
def test_auto_runs_one_worker_when_an_endpoint_is_bound_here(spec: str) -> None:
    endpoints = parse_endpoints({"replica-a": "ipc:///tmp/kv-b", "replica-b": spec})
    plan = plan_workers("auto", endpoints, 16)
    assert plan.count == 1
    assert f"replica-b={spec.removeprefix('bind:')}" in plan.reason


@pytest.mark.parametrize("spec", ["ipc:///tmp/kv-a", "connect:tcp://10.0.0.5:5557"])
def test_endpoints_we_connect_to_allow_every_worker(spec: str) -> None:
    plan = plan_workers("auto", parse_endpoints({"replica-a": spec}), 4)
    assert plan.count == 4


def test_an_explicit_count_is_obeyed_and_a_shared_bind_is_warned_about() -> None:
    bound = parse_endpoints({"replica-a": "tcp://127.0.0.1:5557"})
    assert plan_workers(3, [], 1).count == 3
    alone = plan_workers(1, bound, 8)
    assert alone.count == 1 and alone.warning is None
    plan = plan_workers(3, bound, 8)
    assert plan.count == 3
    assert plan.warning is not None and "replica-a=tcp://127.0.0.1:5557" in plan.warning
    assert "the other 2 worker(s)" in plan.warning


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


def test_available_cpus_is_the_affinity_without_a_quota(tmp_path: Path) -> None:
    assert available_cpus(tmp_path) == _affinity()
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert available_cpus(tmp_path) == _affinity()


@pytest.mark.parametrize(
    ("content", "quota"), [("150000 100000\n", 2), ("100000 100000", 1), ("5000 100000", 1)]
)
def test_a_cgroup_quota_lowers_the_count(tmp_path: Path, content: str, quota: int) -> None:
    (tmp_path / "cpu.max").write_text(content)
    assert available_cpus(tmp_path) == min(_affinity(), quota)


@pytest.mark.parametrize("content", ["", "garbage", "0 100000", "100 0", "1 2 3"])
def test_an_unreadable_quota_is_ignored(tmp_path: Path, content: str) -> None:
    (tmp_path / "cpu.max").write_text(content)
    assert available_cpus(tmp_path) == _affinity()
