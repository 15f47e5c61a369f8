"""The real-tracing tier: Arize Phoenix (a real OTLP receiver, from PyPI, in a cached
virtualenv of its own) and our server as a real process exporting to it with nothing but
the standard ``OTEL_*`` environment; turns go in through the official SDK and their spans
are read back through Phoenix's REST API. Runs only when ``-m real_tracing`` names it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_database
from tests.real_tracing.phoenix import Phoenix
from tests.support.mcp_server import McpTestServer, start_mcp_server
from tests.support.processes import Process, process_env
from tests.upstream_sim import SimServer

# Phoenix files spans under the resource's project name (its own OpenInference attribute).
PROJECT = "agentic-api-real-tracing"


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    receiver = Phoenix(tmp_path_factory.mktemp("phoenix"))
    try:
        receiver.wait_up()
        yield receiver
    finally:
        receiver.stop()


@pytest.fixture(scope="session")
def mcp_server() -> Iterator[McpTestServer]:
    server = start_mcp_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def traced_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    # One backend: spans do not depend on it (the api tier traces turns on both).
    url, _ = make_database("sqlite", tmp_path_factory.mktemp("traced-db"))
    return url


@pytest.fixture(scope="session")
def traced_server(
    phoenix: Phoenix, traced_db: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Process]:
    """``agentic-api serve`` (its default workers) with tracing turned on the way an
    operator does: the OTLP endpoint, a service name, resource attributes."""
    data_dir: Path = tmp_path_factory.mktemp("traced-data")
    env = {
        key: value
        for key, value in process_env(traced_db, sim.url, data_dir, mcp_allow_loopback=True).items()
        if not key.startswith("OTEL_")
    }
    env.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.traces_endpoint,
            "OTEL_SERVICE_NAME": "agentic-api-under-test",
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}",
            # The batch processor's default 5 s delay only slows the test down.
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
    )
    server = Process.serve(env)
    try:
        yield server
    finally:
        server.stop()
