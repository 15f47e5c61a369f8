"""The CLI as a newcomer uses it: real subprocesses, a real server, real HTTP."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import strict_wiring
from tests.support.processes import START_TIMEOUT_SECONDS
from tests.support.servers import free_port
from tests.upstream_sim import SimServer

# Each starts real `agentic-api` processes: seconds apiece.
pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "agentic_api.cli"]


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIC_")}
    env["AGENTIC_DATA_DIR"] = str(tmp_path / "data")
    env["AGENTIC_LOG_FORMAT"] = "json"
    return env


def test_tenant_lifecycle_and_serve(cli_env: dict[str, str], sim: SimServer) -> None:
    created = run_cli(cli_env, "tenant", "create", "acme")
    assert created.returncode == 0, created.stderr
    key = re.search(r"api key \(shown once\): (\S+)", created.stdout).group(1)  # type: ignore[union-attr]
    assert run_cli(cli_env, "tenant", "create", "acme").returncode == 1
    listed = run_cli(cli_env, "tenant", "list")
    assert "acme" in listed.stdout and key not in listed.stdout
    extra = run_cli(cli_env, "key", "create", "acme", "--name", "ci")
    second_key = extra.stdout.split(": ", 1)[1].strip()
    keys = run_cli(cli_env, "key", "list", "acme").stdout.strip().splitlines()
    assert len(keys) == 2
    assert run_cli(cli_env, "key", "create", "nobody").returncode == 1
    admin = run_cli(cli_env, "admin-key", "create")
    assert admin.returncode == 0 and "sk-agentic-admin-" in admin.stdout

    port = free_port()
    env = {**cli_env, "AGENTIC_UPSTREAM_BASE_URL": sim.url}
    server = subprocess.Popen(
        [*CLI, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_up(base, server)
        assert httpx.get(f"{base}/health").json() == {"status": "ok"}
        anonymous = httpx.get(f"{base}/v1/models")
        assert anonymous.status_code == 401 and "error" in anonymous.json()
        authed = httpx.get(f"{base}/v1/models", headers={"authorization": f"Bearer {key}"})
        assert authed.status_code == 200
        key_id = keys[1].split("\t")[0]
        assert run_cli(cli_env, "key", "revoke", key_id).returncode == 0
        assert run_cli(cli_env, "key", "revoke", key_id).returncode == 1
        time.sleep(5.2)  # resolved keys are cached for 5 s
        revoked = httpx.get(f"{base}/v1/models", headers={"authorization": f"Bearer {second_key}"})
        assert revoked.status_code == 401
    finally:
        strict_wiring.unwatch(base)
        server.terminate()
        output, _ = server.communicate(timeout=30)
    assert key not in output and second_key not in output


def test_serve_refuses_single_tenant_on_public_host(cli_env: dict[str, str]) -> None:
    result = run_cli(cli_env, "serve", "--host", "0.0.0.0", "--single-tenant")
    assert result.returncode == 2
    assert "single-tenant" in result.stderr


def test_single_tenant_mode_needs_no_key(cli_env: dict[str, str], sim: SimServer) -> None:
    port = free_port()
    env = {**cli_env, "AGENTIC_UPSTREAM_BASE_URL": sim.url}
    server = subprocess.Popen(
        [*CLI, "serve", "--port", str(port), "--single-tenant"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_up(base, server)
        assert httpx.get(f"{base}/v1/models").status_code == 200
    finally:
        strict_wiring.unwatch(base)
        server.terminate()
        server.wait(timeout=30)


def _wait_up(base: str, process: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, "server exited during start-up"
        try:
            httpx.get(f"{base}/health", timeout=1)
            # Our server: everything it answers passes the strict wire checks.
            strict_wiring.watch(base)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("server did not come up")


def test_serve_with_several_worker_processes(cli_env: dict[str, str], sim: SimServer) -> None:
    created = run_cli(cli_env, "tenant", "create", "multi")
    key = created.stdout.rsplit(": ", 1)[1].strip()
    port = free_port()
    env = {**cli_env, "AGENTIC_UPSTREAM_BASE_URL": sim.url}
    server = subprocess.Popen(
        [*CLI, "serve", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_up(base, server)
        headers = {"authorization": f"Bearer {key}"}
        first = httpx.post(
            f"{base}/v1/responses",
            headers=headers,
            timeout=20,
            json={"model": sim.config.model, "input": "hello"},
        ).json()
        # Consecutive turns may land on either process: both share the database.
        previous = first["id"]
        for turn in range(4):
            reply = httpx.post(
                f"{base}/v1/responses",
                headers=headers,
                timeout=20,
                json={
                    "model": sim.config.model,
                    "input": f"more {turn}",
                    "previous_response_id": previous,
                },
            )
            assert reply.status_code == 200, reply.text
            previous = reply.json()["id"]
    finally:
        strict_wiring.unwatch(base)
        server.terminate()
        output, _ = server.communicate(timeout=30)
    assert output.count("Started server process") == 2
