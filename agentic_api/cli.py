"""The ``agentic-api`` command: serve, worker, migrate, and tenant/key administration."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from agentic_api.cache.residency.endpoints import EndpointError, parse_endpoints
from agentic_api.log import configure_logging, get_logger
from agentic_api.plugin_commands import WithPluginCommands
from agentic_api.serve_workers import WORKER_HEALTHCHECK_SECONDS, available_cpus, plan_workers
from agentic_api.settings import ConfigError, Settings

if TYPE_CHECKING:
    import uvicorn

    from agentic_api.storage.tenants import TenantRepository

# What touches the database (SQLAlchemy, the models, alembic) is imported by the commands
# that use it: each of `serve`'s worker processes imports this module before it answers
# its supervisor's health check (multiprocessing's spawn re-imports the main module), and
# on a loaded machine every second of imports there counts.

T = TypeVar("T")

log = get_logger("agentic_api.cli")

app = typer.Typer(
    help="agentic-api: a stateful OpenAI Responses API server for vLLM.",
    no_args_is_help=True,
    add_completion=False,
    cls=WithPluginCommands,  # adds `bench` (agentic_bench) without importing it here
)
tenant_app = typer.Typer(help="Manage tenants.", no_args_is_help=True)
key_app = typer.Typer(help="Manage tenant API keys.", no_args_is_help=True)
admin_key_app = typer.Typer(help="Manage admin keys.", no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")
app.add_typer(key_app, name="key")
app.add_typer(admin_key_app, name="admin-key")


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _settings() -> Settings:
    try:
        return Settings()
    except Exception as exc:  # pydantic's error names the bad variable
        _fail(f"invalid configuration: {exc}", 2)
        raise


# How long ``serve`` and ``worker`` wait for a database they cannot reach at start (a
# PostgreSQL restarting, or started alongside them) before refusing: a replica restarted
# during a short outage comes up when it ends instead of exiting. A wrong schema is
# refused at once.
START_WAIT_SECONDS = 60.0


def _require_schema(settings: Settings, *, wait_seconds: float = 0.0) -> None:
    """Refuses, in one line, unless the database is at this release's schema; an embedded
    SQLite (or ``AGENTIC_AUTO_MIGRATE``) is migrated first, unless its schema is newer
    than this release knows (nothing migrates down by itself)."""
    from agentic_api.storage.migrate import schema_problem, upgrade

    url = settings.resolved_database_url
    if settings.is_sqlite:
        settings.prepare_data_dir()
    problem = schema_problem(_revisions_waiting(url, wait_seconds))
    if problem is not None and settings.should_auto_migrate and not problem.newer:
        _reached_sync(lambda: upgrade(url))
        problem = schema_problem(_reached(_stored_revisions(url)))
    if problem is not None:
        _fail(str(problem))


def _revisions_waiting(url: str, wait_seconds: float) -> frozenset[str] | None:
    """The stored revisions, retried once a second while the database cannot be reached,
    for up to ``wait_seconds`` (said once on stderr), then refused as ``_reached`` does."""
    from agentic_api.storage.errors import DatabaseUnavailable

    deadline = time.monotonic() + wait_seconds
    waiting = False
    while time.monotonic() < deadline:
        try:
            return asyncio.run(_stored_revisions(url))
        except (OSError, DatabaseUnavailable) as exc:
            if not waiting:
                cause = exc.__cause__ if isinstance(exc, DatabaseUnavailable) else exc
                typer.echo(
                    f"waiting up to {wait_seconds:.0f} s for the database: {cause or exc}",
                    err=True,
                )
                waiting = True
            time.sleep(1.0)
    return _reached(_stored_revisions(url))


async def _stored_revisions(url: str) -> frozenset[str] | None:
    from agentic_api.storage.database import Database

    db = Database.from_url(url, pool_size=1)
    try:
        return await db.schema_revisions()
    finally:
        await db.close()


def _reached(work: Coroutine[Any, Any, T]) -> T:
    return _reached_sync(lambda: asyncio.run(work))


def _reached_sync(work: Callable[[], T]) -> T:
    """``work``, with a database that cannot be reached said in one line."""
    from agentic_api.storage.errors import DatabaseUnavailable

    try:
        return work()
    except (OSError, DatabaseUnavailable) as exc:
        cause = exc.__cause__ if isinstance(exc, DatabaseUnavailable) else exc
        _fail(f"cannot reach the database: {cause or exc}")
        raise


def _with_db(action: Callable[[TenantRepository], Awaitable[T]]) -> T:
    from agentic_api.storage.database import Database
    from agentic_api.storage.tenants import TenantRepository

    settings = _settings()
    _require_schema(settings)

    async def run() -> T:
        db = Database.from_url(settings.resolved_database_url, pool_size=1)
        try:
            async with db.write() as session:
                return await action(TenantRepository(session))
        finally:
            await db.close()

    return _reached(run())


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (AGENTIC_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (AGENTIC_PORT).")] = None,
    upstream: Annotated[
        str | None, typer.Option(help="vLLM / llm-d base URL (AGENTIC_UPSTREAM_BASE_URL).")
    ] = None,
    single_tenant: Annotated[
        bool, typer.Option("--single-tenant", help="Auth off, one local tenant (loopback only).")
    ] = False,
    workers: Annotated[
        str | None,
        typer.Option(
            help="HTTP worker processes: auto (one per CPU, at most 8) or a number "
            "(AGENTIC_HTTP_WORKERS)."
        ),
    ] = None,
) -> None:
    """Run the HTTP server."""
    import uvicorn
    from pydantic import ValidationError
    from uvicorn.config import STARTUP_FAILURE

    from agentic_api.http.protocol import CoalescingHttpToolsProtocol

    overrides: dict[str, object] = {}
    if workers is not None:
        overrides["http_workers"] = workers
    if host is not None:
        overrides["host"] = host
    if port is not None:
        overrides["port"] = port
    if upstream is not None:
        overrides["upstream_base_url"] = upstream
    if single_tenant:
        overrides["single_tenant"] = True
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
        settings.check()
        endpoints = parse_endpoints(settings.kv_events_endpoints)
    except ValidationError as exc:
        _fail(f"invalid configuration: {exc}", 2)
        return
    except EndpointError as exc:
        _fail(f"AGENTIC_KV_EVENTS_ENDPOINTS: {exc}", 2)
        return
    except ConfigError as exc:
        _fail(str(exc), 2)
        return
    _require_schema(settings, wait_seconds=START_WAIT_SECONDS)
    configure_logging(settings.log_format, settings.log_level)
    plan = plan_workers(settings.http_workers, endpoints, available_cpus())
    log.info("http workers", workers=plan.count, reason=plan.reason)
    if plan.warning is not None:
        log.warning("http workers cannot all follow a kv event endpoint", detail=plan.warning)
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "access_log": False,
        "timeout_graceful_shutdown": 30,
        # Room for a frame our own limit then refuses with a clear error frame.
        "ws_max_size": settings.max_body_bytes * 4 + 65536,
        "http": CoalescingHttpToolsProtocol,
        # A replacement worker answers its first health check only once its interpreter
        # has started and imported this module (spawn), seconds on a loaded machine:
        # uvicorn's 5 s default killed replacements while they booted.
        "timeout_worker_healthcheck": WORKER_HEALTHCHECK_SECONDS,
        # The proxies whose X-Forwarded-Proto / -For are believed (AGENTIC_FORWARDED_ALLOW_IPS).
        "proxy_headers": True,
        "forwarded_allow_ips": settings.forwarded_allow_ips,
    }
    if plan.count == 1:
        # Imported here only: a supervisor of several workers never builds an app.
        from agentic_api.app import create_app
        from agentic_api.http.quiet_server import QuietServer

        # uvicorn.run's single-process path, with a server whose idle loop is quieter.
        server = QuietServer(uvicorn.Config(create_app(settings), **common))
        with contextlib.suppress(KeyboardInterrupt):
            server.run()
        if not server.started:
            sys.exit(STARTUP_FAILURE)
        return
    # Several processes: prepare what they share once, here, then let each build its app
    # from the same environment (uvicorn re-imports the factory in every worker).
    settings.load_server_secret()
    for name, value in overrides.items():
        os.environ[f"AGENTIC_{name.upper()}"] = (
            str(value).lower() if isinstance(value, bool) else str(value)
        )
    os.environ["AGENTIC_AUTO_MIGRATE"] = "false"
    with _shared_metrics_dir():
        _supervise(
            uvicorn.Config(
                "agentic_api.app:create_worker_app", factory=True, workers=plan.count, **common
            )
        )


def _supervise(config: uvicorn.Config) -> None:
    """uvicorn.run's several-workers path, with our supervisor (worker_supervisor.py)."""
    from agentic_api.worker_supervisor import WorkerSupervisor

    socket = config.bind_socket()
    try:
        with contextlib.suppress(KeyboardInterrupt):
            WorkerSupervisor(config, sockets=[socket]).run()
    finally:
        socket.close()


@contextlib.contextmanager
def _shared_metrics_dir() -> Iterator[None]:
    """A fresh directory for the workers' metric files (prometheus-client's multiprocess
    mode, chosen by each worker when it imports the library, from the environment it
    inherits): private to this server, so two servers on one host never mix their counts,
    and removed at exit, so a restart starts from zero as a single process would."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        log.warning("PROMETHEUS_MULTIPROC_DIR replaced by this server's own", given=given)
    directory = tempfile.mkdtemp(prefix="agentic-api-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    try:
        yield
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@app.command()
def worker(
    workers: Annotated[
        int | None,
        typer.Option(
            min=1, help="Jobs run at once (default: AGENTIC_BACKGROUND_WORKERS, at least 1)."
        ),
    ] = None,
) -> None:
    """Run background-job workers without the HTTP server (scale them apart from the API)."""
    from agentic_api.app import run_workers

    settings = _settings()
    try:
        settings.check()
    except ConfigError as exc:
        _fail(str(exc), 2)
        return
    _require_schema(settings, wait_seconds=START_WAIT_SECONDS)
    asyncio.run(run_workers(settings, workers or max(settings.background_workers, 1)))


@app.command()
def migrate() -> None:
    """Upgrade the database schema to the latest revision."""
    from agentic_api.storage.migrate import schema_problem, upgrade

    settings = _settings()
    if settings.is_sqlite:
        settings.prepare_data_dir()
    problem = schema_problem(_reached(_stored_revisions(settings.resolved_database_url)))
    if problem is not None and problem.newer:
        _fail(str(problem))
    _reached_sync(lambda: upgrade(settings.resolved_database_url))
    typer.echo("database is at the latest revision")


@tenant_app.command("create")
def tenant_create(name: str) -> None:
    """Create a tenant and print its first API key (shown only once)."""

    async def action(repo: TenantRepository) -> tuple[str, str]:
        if await repo.by_name(name) is not None:
            _fail(f"a tenant named {name!r} already exists")
        tenant = await repo.create(name)
        key = await repo.issue_key(tenant, name="initial")
        return tenant.id, key.plaintext

    tenant_id, plaintext = _with_db(action)
    typer.echo(f"tenant: {tenant_id} ({name})")
    typer.echo(f"api key (shown once): {plaintext}")


@tenant_app.command("list")
def tenant_list() -> None:
    """List tenants."""

    async def action(repo: TenantRepository) -> list[str]:
        rows = []
        for tenant in await repo.list(limit=10_000):
            state = "disabled" if tenant.disabled_at else "active"
            rows.append(f"{tenant.id}\t{tenant.name}\t{state}\tsalt-epoch={tenant.salt_epoch}")
        return rows

    for row in _with_db(action):
        typer.echo(row)


@key_app.command("create")
def key_create(
    tenant: Annotated[str, typer.Argument(help="Tenant name or id.")],
    name: Annotated[str | None, typer.Option(help="A label for the key.")] = None,
) -> None:
    """Issue another API key for a tenant (printed once)."""

    async def action(repo: TenantRepository) -> str:
        found = await repo.by_name_or_id(tenant)
        if found is None:
            _fail(f"no tenant {tenant!r}")
            raise AssertionError
        return (await repo.issue_key(found, name=name)).plaintext

    typer.echo(f"api key (shown once): {_with_db(action)}")


@key_app.command("list")
def key_list(tenant: Annotated[str, typer.Argument(help="Tenant name or id.")]) -> None:
    """List a tenant's keys (ids and display prefixes only)."""

    async def action(repo: TenantRepository) -> list[str]:
        found = await repo.by_name_or_id(tenant)
        if found is None:
            _fail(f"no tenant {tenant!r}")
            raise AssertionError
        return [
            f"{k.id}\t{k.key_prefix}…\t{'revoked' if k.revoked_at else 'active'}\t{k.name or ''}"
            for k in await repo.keys(found.id)
        ]

    for row in _with_db(action):
        typer.echo(row)


@key_app.command("revoke")
def key_revoke(key_id: str) -> None:
    """Revoke an API key by id."""

    async def action(repo: TenantRepository) -> bool:
        return await repo.revoke_key(key_id)

    if not _with_db(action):
        _fail(f"no active key {key_id!r}")
    typer.echo(f"revoked {key_id}")


@admin_key_app.command("create")
def admin_key_create(
    name: Annotated[str | None, typer.Option(help="A label for the key.")] = None,
) -> None:
    """Issue an admin key for /admin/v1 (printed once)."""

    async def action(repo: TenantRepository) -> str:
        return (await repo.issue_admin_key(name)).plaintext

    typer.echo(f"admin key (shown once): {_with_db(action)}")


@admin_key_app.command("revoke")
def admin_key_revoke(key_id: str) -> None:
    """Revoke an admin key by id."""

    async def action(repo: TenantRepository) -> bool:
        return await repo.revoke_admin_key(key_id)

    if not _with_db(action):
        _fail(f"no active admin key {key_id!r}")
    typer.echo(f"revoked {key_id}")


def main() -> None:
    try:
        app()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
