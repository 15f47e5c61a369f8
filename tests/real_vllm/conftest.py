"""The real-vLLM tier: a real ``vllm serve`` (CPU, tiny random Llama) and our server in
front of it on SQLite and PostgreSQL.

The vLLM comes from ``AGENTIC_REAL_VLLM_URL`` when set (reused, left running); otherwise
``scripts/real_vllm/setup.sh`` (cached) and ``start.sh`` start one on a free port for the
session and ``stop.sh`` ends it. Measured cache reuse is collected and printed in the
terminal summary (and written as JSON to ``AGENTIC_REAL_VLLM_REPORT`` when set).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer, app_server, make_database
from tests.support.databases import drop_pg_database
from tests.support.servers import free_port

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "real_vllm"
REPORT: list[dict[str, Any]] = []
# The KV block size every vLLM of the tier starts with (start.sh's --block-size): 32 by
# default (the CPU build's attention takes multiples of 32); 64 is vLLM 0.34's default on
# GPU, so AGENTIC_VLLM_BLOCK_SIZE=64 runs the tier as a 0.34 engine would cache.
BLOCK_SIZE = int(os.environ.get("AGENTIC_VLLM_BLOCK_SIZE", "32"))


@dataclass(frozen=True)
class RealVllm:
    url: str
    model: str
    block_size: int


@contextmanager
def served_vllm(
    url_variable: str,
    *start_args: str,
    prepare: Callable[[], Mapping[str, str]] | None = None,
) -> Iterator[RealVllm]:
    """The vLLM at ``$url_variable`` (reused, left running); else, after setup.sh (cached)
    and ``prepare`` (which gives start.sh's environment), one that start.sh starts on a free
    port with ``start_args``, stopped by stop.sh when the block ends."""
    given = os.environ.get(url_variable)
    port: int | None = None
    if given:
        url = given.rstrip("/").removesuffix("/v1")
    else:
        subprocess.run([str(SCRIPTS / "setup.sh")], check=True, stdout=subprocess.DEVNULL)
        env = prepare() if prepare is not None else None
        port = free_port()
        started = subprocess.run(
            [str(SCRIPTS / "start.sh"), str(port), *start_args],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        url = started.stdout.strip().splitlines()[-1]
    try:
        models = httpx.get(f"{url}/v1/models", timeout=10).json()
        yield RealVllm(url, models["data"][0]["id"], BLOCK_SIZE)
    finally:
        if port is not None:
            subprocess.run([str(SCRIPTS / "stop.sh"), str(port)], check=False)


@pytest.fixture(scope="session")
def real_vllm() -> Iterator[RealVllm]:
    with served_vllm("AGENTIC_REAL_VLLM_URL") as vllm:
        yield vllm


@pytest.fixture(scope="session")
def real_server(
    backend: str, db_url: str, real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    data_dir = tmp_path_factory.mktemp("data")
    with app_server(backend, db_url, real_vllm.url, data_dir) as running:
        yield running


@pytest.fixture(scope="module")
def kv_db_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The KV residency modules' database. One backend (PostgreSQL, as in production):
    residency lives in memory, and the admin queries it needs run on both backends in the
    api tier. Parametrizing them by backend would also start their replicas again next to
    the session's vLLM."""
    url, name = make_database("postgres", tmp_path_factory.mktemp("kv-real-db"))
    yield url
    if name:
        drop_pg_database(name)


@pytest.fixture(scope="session")
def smollm2() -> Iterator[RealVllm]:
    """SmolLM2-135M-Instruct (a real instruct model, float32) on CPU vLLM, with prefix
    caching, the hermes tool parser and the render endpoint (``--enable-scale-out``).
    ``AGENTIC_SMOLLM2_URL`` reuses a running one (started with those flags)."""

    def built() -> dict[str, str]:
        setup = subprocess.run(
            [str(SCRIPTS / "setup_smollm2.sh")], check=True, capture_output=True, text=True
        )
        model_dir = setup.stdout.strip().splitlines()[-1].partition("=")[2]
        return {
            **os.environ,
            "AGENTIC_VLLM_MODEL_DIR": model_dir,
            "AGENTIC_VLLM_START_TIMEOUT": os.environ.get("AGENTIC_VLLM_START_TIMEOUT", "300"),
        }

    with served_vllm(
        "AGENTIC_SMOLLM2_URL",
        "smollm2",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--enable-scale-out",
        prepare=built,
    ) as vllm:
        yield vllm


@pytest.fixture(scope="session")
def smol_server(
    backend: str, db_url: str, smollm2: RealVllm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """Our server in front of SmolLM2; token artifacts required (start-up fails without)."""
    data_dir = tmp_path_factory.mktemp("smol-data")
    with app_server(backend, db_url, smollm2.url, data_dir, token_artifacts="required") as running:
        yield running


@pytest.fixture
def report() -> list[dict[str, Any]]:
    return REPORT


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not REPORT:
        return
    terminalreporter.section("real vLLM: measured vs ideal cached tokens")
    for row in REPORT:
        terminalreporter.write_line(
            "  ".join(f"{key}={value}" for key, value in row.items() if value is not None)
        )
    target = os.environ.get("AGENTIC_REAL_VLLM_REPORT")
    if target:
        Path(target).write_text(json.dumps(REPORT, indent=2) + "\n", encoding="utf-8")
