"""Shared fixtures: the simulator upstream, databases (SQLite and PostgreSQL, built by
the real migrations) and our server on a real loopback port.

Backend-parametrized tests run once per backend that ``--backend`` (or
``AGENTIC_TEST_BACKEND``) selects: ``sqlite``, ``postgres`` (or ``postgresql``), or ``all``
(the default). Tests of one database's specifics that need a server (PostgreSQL) are
deselected when it is not selected; SQLite needs nothing, so its own tests always run.

Under pytest-xdist every worker is a process of its own: session fixtures (simulator,
databases, servers) are per worker, on ports and database names picked free.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from openai import OpenAI

from agentic_api.app import create_app
from agentic_api.settings import Settings
from agentic_api.storage.database import Database
from agentic_api.storage.migrate import upgrade
from tests.support import strict, strict_wiring
from tests.support.clients import close_all, openai_client
from tests.support.databases import create_pg_database, drop_pg_database, sqlite_url
from tests.support.servers import ThreadedServer
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import SimServer

BACKENDS = ("sqlite", "postgres")

# Every reply of our servers passes tests/support/strict.py, whoever reads it.
strict_wiring.install()
_BACKEND_NAMES = {"sqlite": ("sqlite",), "postgres": ("postgres",), "all": BACKENDS}
_BACKEND_NAMES["postgresql"] = _BACKEND_NAMES["postgres"]
# Fixtures that only one backend can provide: their tests run only when it is selected.
_ONE_BACKEND_FIXTURES = {"pg_url": "postgres"}
_ON_REQUEST_MARKERS = ("real_vllm", "real_tracing", "fuzz", "scale_out")
TEST_SECRET = "test-server-secret-0123456789abcdef"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        default=os.environ.get("AGENTIC_TEST_BACKEND", "all"),
        help="databases to run backend tests on: sqlite, postgres (postgresql) or all "
        "(default: $AGENTIC_TEST_BACKEND, else all)",
    )


def selected_backends(config: pytest.Config) -> tuple[str, ...]:
    choice = str(config.getoption("backend")).strip().lower()
    if choice not in _BACKEND_NAMES:
        raise pytest.UsageError(
            f"--backend / AGENTIC_TEST_BACKEND must be one of {sorted(_BACKEND_NAMES)}, "
            f"not {choice!r}"
        )
    return _BACKEND_NAMES[choice]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize(
            "backend", selected_backends(metafunc.config), indirect=True, scope="session"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = set(selected_backends(config))
    # Tiers that start something of their own (a vLLM, a fuzzing run) run only when -m
    # names them, so that other -m expressions (-m "not slow") never pull them in.
    named = str(config.getoption("markexpr", ""))
    left_aside = [marker for marker in _ON_REQUEST_MARKERS if marker not in named]
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        needs = {
            backend
            for name, backend in _ONE_BACKEND_FIXTURES.items()
            if name in getattr(item, "fixturenames", ())
        }
        runnable = needs <= selected and not any(
            item.get_closest_marker(marker) for marker in left_aside
        )
        (kept if runnable else left_out).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


@pytest.fixture(scope="session")
def sim() -> Iterator[SimServer]:
    with SimServer(incomplete_event="response.completed") as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_sim_script(request: pytest.FixtureRequest) -> None:
    # Only tests that use the simulator pay for it; they start with an empty script.
    if "sim" in request.fixturenames:
        request.getfixturevalue("sim").reset()


@pytest.fixture(autouse=True)
def _strict_replies() -> Iterator[None]:
    """Fails the test if anything our servers sent it broke a strict rule, even where a
    client library caught the violation (the SDK reports it as a connection error)."""
    strict.take_violations()
    yield
    violations = strict.take_violations()
    if violations:
        pytest.fail(
            "strict wire violations:\n" + "\n".join(str(v) for v in violations[:20]),
            pytrace=False,
        )


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    """``sqlite`` or ``postgres``: parametrized by ``pytest_generate_tests``."""
    return str(request.param)


def make_database(backend: str, folder: Path) -> tuple[str, str | None]:
    if backend == "sqlite":
        url = sqlite_url(folder)
        upgrade(url)
        return url, None
    name, url = create_pg_database()
    upgrade(url)
    return url, name


@pytest.fixture(scope="session")
def db_url(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url, pg_name = make_database(backend, tmp_path_factory.mktemp(f"db-{backend}"))
    yield url
    if pg_name:
        drop_pg_database(pg_name)


def server_settings(
    db_url: str, upstream_url: str, data_dir: Path, **overrides: object
) -> Settings:
    values: dict[str, object] = {
        "database_url": db_url,
        "upstream_base_url": upstream_url,
        "data_dir": data_dir,
        "server_secret": TEST_SECRET,
        "log_format": "console",
        "log_level": "warning",
        "auto_migrate": False,
        "shutdown_grace_seconds": 2.0,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@dataclass
class RunningServer:
    url: str
    db_url: str
    settings: Settings
    backend: str

    def client(self, tenant: TenantKeys, **kwargs: object) -> OpenAI:
        return openai_client(f"{self.url}/v1", tenant.api_key, **kwargs)


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    close_all()


@contextmanager
def app_server(
    backend: str, db_url: str, upstream_url: str, data_dir: Path, **overrides: object
) -> Iterator[RunningServer]:
    """Our app on a loopback port for the duration of the block."""
    settings = server_settings(db_url, upstream_url, data_dir, **overrides)
    running = ThreadedServer(create_app(settings)).start()
    try:
        yield RunningServer(running.url, db_url, settings, backend)
    finally:
        running.stop()


@pytest.fixture(scope="session")
def server(
    backend: str, db_url: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    with app_server(backend, db_url, sim.url, tmp_path_factory.mktemp("data")) as running:
        yield running


@pytest.fixture
def tenant(server: RunningServer) -> TenantKeys:
    return create_tenant(server.db_url)


@pytest.fixture
def client(server: RunningServer, tenant: TenantKeys) -> OpenAI:
    return server.client(tenant, timeout=20)


@pytest.fixture
def fresh_db(backend: str, tmp_path: Path) -> Iterator[str]:
    """A database of its own for one test (for tests that stop, kill or reconfigure
    servers, or must not see other tests' background jobs)."""
    url, pg_name = make_database(backend, tmp_path)
    yield url
    if pg_name:
        drop_pg_database(pg_name)


@pytest.fixture
def sqlite_file_url(tmp_path: Path) -> str:
    """A migrated SQLite database of its own, for tests of SQLite specifics."""
    url = sqlite_url(tmp_path)
    upgrade(url)
    return url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A migrated PostgreSQL database of its own, for tests of PostgreSQL specifics (run
    only when PostgreSQL is a selected backend)."""
    name, url = create_pg_database()
    upgrade(url)
    yield url
    drop_pg_database(name)


@pytest.fixture
async def sqlite_database(sqlite_file_url: str) -> AsyncIterator[Database]:
    database = Database.from_url(sqlite_file_url)
    yield database
    await database.close()


@contextmanager
def running_server(
    db_url: str, sim: SimServer, data_dir: Path, **overrides: object
) -> Iterator[RunningServer]:
    """An in-process server with its own settings, stopped (gracefully) on exit."""
    settings = server_settings(db_url, sim.url, data_dir, **overrides)
    running = ThreadedServer(create_app(settings)).start()
    try:
        yield RunningServer(running.url, db_url, settings, "custom")
    finally:
        running.stop()
