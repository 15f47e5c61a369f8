"""`agentic-api serve` with several HTTP worker processes, as a real subprocess on loopback:
what ``auto`` starts and why it says so, and /metrics counting every turn whichever
worker ran it and whichever worker answers the scrape (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from agentic_api.serve_workers import available_cpus, plan_workers
from tests.support.clients import openai_client
from tests.support.processes import CLI, START_TIMEOUT_SECONDS, Process, process_env
from tests.support.servers import free_port
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import SimServer

# Each starts a real multi-process server: seconds apiece.
pytestmark = pytest.mark.slow

CONNECTIONS = 6
TURNS_PER_ROUND = 12
MAX_ROUNDS = 20


def _env(fresh_db: str, sim: SimServer, data_dir: Path, **settings: object) -> dict[str, str]:
    # JSON at info: the start-up line saying how many workers run and why.
    return process_env(fresh_db, sim.url, data_dir, log_format="json", log_level="info", **settings)


def _log_records(output: str) -> list[dict[str, Any]]:
    records = []
    for line in output.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def _workers_line(process: Process) -> dict[str, Any]:
    lines = [r for r in _log_records(process.output()) if r.get("event") == "http workers"]
    assert len(lines) == 1, process.output()
    return lines[0]


def _samples(text: str, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def _turns(text: str) -> float:
    return _samples(text, "agentic_turns_total", api="responses", status="completed")


def _served(text: str) -> float:
    return _samples(
        text, "agentic_http_requests_total", method="POST", route="/v1/responses", status="200"
    )


def _metrics_dir(data_dir: Path) -> Path:
    (directory,) = (data_dir / "tmp").glob("agentic-api-metrics-*")
    return directory


def _turns_by_worker(directory: Path) -> dict[int, float]:
    """Completed turns each worker counted, read from its own file the way the merging
    collector reads them."""
    counts: dict[int, float] = {}
    for file in directory.glob("counter_*.db"):
        pid = int(file.stem.rpartition("_")[2])
        merged = MultiProcessCollector.merge([str(file)])
        counts[pid] = sum(
            sample.value
            for family in merged
            for sample in family.samples
            if sample.name == "agentic_turns_total" and sample.labels.get("status") == "completed"
        )
    return counts


def _run_turns(url: str, tenant: TenantKeys, model: str, count: int) -> None:
    """``count`` turns over CONNECTIONS clients at once (one connection each, so the
    kernel hands them to different workers), half of them streamed."""

    def one_client(index: int) -> None:
        client = openai_client(f"{url}/v1", tenant.api_key, timeout=30)
        for turn in range(index, count, CONNECTIONS):
            if turn % 2:
                with client.responses.stream(model=model, input=f"streamed {turn}") as stream:
                    assert stream.get_final_response().status == "completed"
            else:
                response = client.responses.create(model=model, input=f"turn {turn}")
                assert response.status == "completed"
        client.close()

    with ThreadPoolExecutor(CONNECTIONS) as pool:
        list(pool.map(one_client, range(CONNECTIONS)))


def test_metrics_count_every_turn_across_two_workers(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    tenant = create_tenant(fresh_db)
    data_dir = tmp_path / "data"
    server = Process(_env(fresh_db, sim, data_dir), "serve", "--workers", "2")
    try:
        server.wait_up()
        line = _workers_line(server)
        assert line["workers"] == 2 and "--workers" in line["reason"]
        directory = _metrics_dir(data_dir)
        made = 0
        # Until both workers have run turns (the kernel decides which accepts a connection).
        for _ in range(MAX_ROUNDS):
            _run_turns(server.url, tenant, sim.config.model, TURNS_PER_ROUND)
            made += TURNS_PER_ROUND
            by_worker = _turns_by_worker(directory)
            if len(by_worker) == 2 and all(by_worker.values()):
                break
        assert len(by_worker) == 2 and all(by_worker.values()), by_worker
        assert sum(by_worker.values()) == made
        # Each scrape on a connection of its own: whichever worker answers, the server's
        # totals.
        for _ in range(6):
            text = httpx.get(f"{server.url}/metrics", timeout=10).text
            assert _turns(text) == made
            assert _served(text) == made
            assert _samples(text, "agentic_streams_in_flight") == 0
            # Merged files carry no per-process collectors.
            assert _samples(text, "process_cpu_seconds_total") == 0
    finally:
        server.stop()
    assert server.popen.returncode == 0, server.output()
    assert server.output().count("Started server process") == 2
    # The directory was the server's own, and it is gone with it.
    assert not list((data_dir / "tmp").glob("agentic-api-metrics-*"))


def test_auto_runs_one_worker_per_cpu_and_says_so(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    expected = plan_workers("auto", [], available_cpus()).count
    server = Process(_env(fresh_db, sim, tmp_path / "data"), "serve")
    try:
        server.wait_up()
        line = _workers_line(server)
        assert line["workers"] == expected
        assert line["reason"].startswith(f"auto: {available_cpus()} CPU(s) available")
    finally:
        server.stop()
    assert server.output().count("Started server process") == expected


def test_auto_runs_one_worker_when_it_binds_a_kv_event_endpoint(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    env = _env(fresh_db, sim, tmp_path / "data", kv_events_endpoints=f"replica-a={endpoint}")
    server = Process(env, "serve")
    try:
        server.wait_up()
        line = _workers_line(server)
        assert line["workers"] == 1
        assert f"replica-a={endpoint}" in line["reason"] and "bound" in line["reason"]
        # One process: the plain registry, with its process metrics.
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
        assert _samples(text, "process_cpu_seconds_total") > 0
    finally:
        server.stop()
    assert server.output().count("Started server process") == 1


def test_an_explicit_count_with_a_bound_endpoint_is_obeyed_and_warned_about(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    env = _env(fresh_db, sim, tmp_path / "data", kv_events_endpoints=f"replica-a={endpoint}")
    server = Process(env, "serve", "--workers", "2")
    try:
        server.wait_up()
        assert _workers_line(server)["workers"] == 2
        warnings = [r for r in _log_records(server.output()) if r.get("level") == "warning"]
        assert any(f"replica-a={endpoint}" in str(r.get("detail")) for r in warnings)
    finally:
        server.stop()
    assert server.output().count("Started server process") == 2


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--workers", "0"], {}),
        (["--workers", "many"], {}),
        ([], {"AGENTIC_HTTP_WORKERS": "-3"}),
        ([], {"AGENTIC_KV_EVENTS_ENDPOINTS": "replica-a=tcp://*:5557"}),
    ],
)
def test_a_bad_worker_count_or_endpoint_is_refused_before_starting(
    fresh_db: str, sim: SimServer, tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    result = subprocess.run(
        [*CLI, "serve", "--port", str(free_port()), *args],
        env={**_env(fresh_db, sim, tmp_path / "data"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr


def _children(parent: int) -> list[int]:
    """Running (not zombie) processes whose parent is ``parent``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        state, ppid = text.rpartition(")")[2].split()[:2]
        if int(ppid) == parent and state not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_workers_stop_when_their_supervisor_is_killed(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    """kill -9 of the supervisor alone (not its group): its workers must not live on as
    orphans serving the port."""
    server = Process(_env(fresh_db, sim, tmp_path / "data"), "serve", "--workers", "2")
    workers: list[int] = []
    try:
        server.wait_up()
        # One worker answering /health does not mean the other has started: killed before
        # its startup, it would stop without a shutdown of its own to log.
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while server.output().count("Application startup complete") < 2:
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.05)
        workers = _children(server.popen.pid)
        # uvicorn's two workers (multiprocessing may add a resource tracker).
        assert len(workers) >= 2, workers
        os.kill(server.popen.pid, signal.SIGKILL)
        server.popen.wait(timeout=10)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while any(_running(pid) for pid in workers):
            assert time.monotonic() < deadline, "workers outlived their supervisor"
            time.sleep(0.1)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/health", timeout=5)
    finally:
        server.stop()
        # Should this fail, leave no orphan behind.
        for pid in filter(_running, workers):
            os.kill(pid, signal.SIGKILL)
    # They stopped as on SIGTERM: gracefully, each through its shutdown.
    assert server.output().count("Application shutdown complete") == 2, server.output()
