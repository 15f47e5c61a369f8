"""The application factory: ``create_app(settings)`` wires storage, upstream and routes."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import multiprocessing
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute

from agentic_api import __version__, tracing
from agentic_api.background.worker import BackgroundWorkers
from agentic_api.cache.keep_warm import KeepWarm
from agentic_api.cache.placement_book import PlacementBook
from agentic_api.cache.recent import RecentArtifacts
from agentic_api.cache.residency.endpoints import Endpoint, EndpointError, parse_endpoints
from agentic_api.cache.residency.subscriber import KvEventSubscriber
from agentic_api.cache.residency.tags import SessionTags
from agentic_api.cache.residency.tracker import ResidencyTracker
from agentic_api.http.credential_conflict import CredentialConflictMiddleware
from agentic_api.http.errors import install_error_handlers
from agentic_api.http.hot_route import HotRouteMiddleware, find_route
from agentic_api.http.middleware import (
    BodyMiddleware,
    RequestContextMiddleware,
    UnhandledErrorMiddleware,
    UrlMiddleware,
)
from agentic_api.http.openapi import install_openapi
from agentic_api.http.routes import (
    compact,
    conversations,
    health,
    input_tokens,
    messages,
    metrics,
    models,
    responses,
    websocket,
)
from agentic_api.log import configure_logging, get_logger
from agentic_api.metrics import label_tenants, mark_this_process_dead
from agentic_api.operator.http import admin, console, residency
from agentic_api.operator.http.console.login_limit import LoginLimiter
from agentic_api.runtime import Runtime
from agentic_api.serving.keep_warm import KeepWarmLoop
from agentic_api.serving.replica_probe import ReplicaProbe
from agentic_api.serving.tenants import LOCAL_TENANT_NAME, KeyMemo
from agentic_api.settings import ConfigError, Settings
from agentic_api.storage.database import Database
from agentic_api.storage.migrate import require_current, upgrade_async
from agentic_api.storage.tenants import TenantRepository
from agentic_api.storage.verified_histories import VerifiedHistories
from agentic_api.upstream.capabilities import TokenCapabilityMemo
from agentic_api.upstream.client import UpstreamClient

log = get_logger("agentic_api.app")


async def build_services(settings: Settings) -> Runtime:
    settings.check()
    endpoints = _kv_event_endpoints(settings)
    secret = settings.load_server_secret()
    if settings.is_sqlite:
        settings.prepare_data_dir()
    if settings.should_auto_migrate:
        await upgrade_async(settings.resolved_database_url)
    db = Database.from_url(settings.resolved_database_url, pool_size=settings.database_pool_size)
    try:
        # `serve` and `worker` refused already (cli.py); an app built otherwise never
        # starts on a database whose schema is not this release's either.
        require_current(await db.schema_revisions())
    except BaseException:
        await db.close()
        raise
    # Named replicas: one client each, and the first answers what is not a turn's round
    # (models, health, the token capability probe); else the one upstream URL.
    replicas = {
        name: _upstream_client(settings, url) for name, url in settings.upstream_replicas.items()
    }
    upstream = (
        next(iter(replicas.values()))
        if replicas
        else _upstream_client(settings, settings.upstream_base_url)
    )
    services = Runtime(
        settings=settings,
        db=db,
        upstream=upstream,
        secret=secret,
        tokens=TokenCapabilityMemo(
            upstream, settings.token_artifacts, block_size=settings.kv_block_size
        ),
        artifacts=RecentArtifacts(int(settings.token_artifact_memo_mb * 2**20)),
        histories=VerifiedHistories(int(settings.history_memo_mb * 2**20)),
        session_tags=SessionTags(
            in_body=settings.upstream_session_id_in_body,
            report_reuse=settings.kv_events_report_reuse,
        ),
    )
    if endpoints:
        _attach_residency(services, settings, endpoints)
    if replicas:
        services.replicas = replicas
        services.placement = PlacementBook(
            replicas,
            eject_seconds=settings.placement_eject_seconds,
            residency=services.residency,
            claim_seconds=settings.placement_claim_seconds,
        )
    if settings.keep_warm_enabled and services.residency is not None:
        services.keep_warm = KeepWarm(
            services.residency,
            ttl_seconds=settings.keep_warm_ttl_seconds,
            tokens_per_minute=settings.keep_warm_tokens_per_minute,
            tenant_tokens_per_minute=settings.keep_warm_tenant_tokens_per_minute,
            max_rewarms_per_pause=settings.keep_warm_max_rewarms_per_pause,
            pause_on=settings.keep_warm_pause_on,
            when=settings.keep_warm_when,
            lead_seconds=settings.keep_warm_lead_seconds,
        )
    if settings.single_tenant:
        await _ensure_local_tenant(db)
    try:
        # Before any turn: turns only ask for token ids the upstream is known to give.
        await services.tokens.start()
    except BaseException:
        await services.close()
        raise
    return services


def _upstream_client(settings: Settings, url: str) -> UpstreamClient:
    key = settings.upstream_api_key
    return UpstreamClient(
        url,
        api_key=key.get_secret_value() if key else None,
        connect_timeout=settings.upstream_connect_timeout,
        read_timeout=settings.upstream_read_timeout,
        models_memo_seconds=settings.models_memo_seconds,
    )


def start_replica_probe(services: Runtime) -> ReplicaProbe | None:
    """The named replicas' health and load probe of this process (stop it before closing)."""
    if services.placement is None:
        return None
    probe = ReplicaProbe(services, services.placement)
    probe.start()
    return probe


def _kv_event_endpoints(settings: Settings) -> list[Endpoint]:
    try:
        return parse_endpoints(settings.kv_events_endpoints)
    except EndpointError as exc:
        raise ConfigError(f"AGENTIC_KV_EVENTS_ENDPOINTS: {exc}") from exc


def _attach_residency(services: Runtime, settings: Settings, endpoints: list[Endpoint]) -> None:
    """One KV-event subscription per process; started by ``serve``'s lifespan and by
    ``agentic-api worker`` (``start_residency``)."""
    services.residency = ResidencyTracker(
        [endpoint.replica for endpoint in endpoints],
        max_sessions=settings.residency_max_sessions,
        max_blocks_per_session=settings.residency_max_blocks_per_session,
        evictions_kept=settings.residency_evictions_kept,
        max_blocks=settings.residency_max_blocks,
    )
    services.kv_events = KvEventSubscriber(
        services.residency, endpoints, queue_messages=settings.kv_events_queue_messages
    )


def start_residency(services: Runtime) -> None:
    if services.kv_events is not None:
        services.kv_events.start()


def start_keep_warm(services: Runtime) -> KeepWarmLoop | None:
    """The keep-warm loop of this process, when enabled (stop it before closing)."""
    if services.keep_warm is None:
        return None
    loop = KeepWarmLoop(services, services.keep_warm)
    loop.start()
    return loop


async def _ensure_local_tenant(db: Database) -> None:
    async with db.write() as session:
        repo = TenantRepository(session)
        if await repo.by_name(LOCAL_TENANT_NAME) is None:
            await repo.create(LOCAL_TENANT_NAME)


async def run_workers(settings: Settings, count: int) -> None:
    """``agentic-api worker``: background workers and the sweep, no HTTP server, until
    SIGTERM or SIGINT (then running jobs get the shutdown grace to finish)."""
    configure_logging(settings.log_format, settings.log_level)
    services = await build_services(settings)
    workers = BackgroundWorkers(services, count)
    start_residency(services)
    keep_warm = start_keep_warm(services)
    probe = start_replica_probe(services)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    workers.start()
    log.info("workers started", database=services.db.dialect, workers=count)
    try:
        await stop.wait()
    finally:
        if keep_warm is not None:
            await keep_warm.stop()
        if probe is not None:
            await probe.stop()
        await workers.stop(settings.shutdown_grace_seconds)
        await services.close()
        log.info("workers stopped")


def create_worker_app() -> FastAPI:
    """The factory ``serve`` gives uvicorn for several workers: one worker's app, built
    from the environment, that stops when its supervisor is gone."""
    _stop_with_supervisor()
    return create_app()


# prctl(2): the signal this process gets when the thread that started it exits.
_PR_SET_PDEATHSIG = 1


def _stop_with_supervisor() -> None:
    # uvicorn's supervisor forwards SIGTERM to its workers, but if it is SIGKILLed (kill -9,
    # the OOM killer) they live on as orphans serving its socket, and a restart cannot bind
    # the port. Linux tells a child when its parent dies: SIGTERM then, the same graceful
    # stop the supervisor would have asked for. (uvicorn starts and restarts workers from
    # its main thread, which lives as long as the supervisor.)
    parent = multiprocessing.parent_process()
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("worker not tied to its supervisor", errno=ctypes.get_errno())
        return
    if os.getppid() != parent.pid:
        # Gone before the request took effect: no signal will come.
        raise RuntimeError("the supervisor exited before this worker started")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    configure_logging(settings.log_format, settings.log_level)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        traced = tracing.configure_from_environment()
        services = await build_services(settings)
        app.state.services = services
        app.state.key_memo = KeyMemo()
        workers = BackgroundWorkers(services, settings.background_workers)
        workers.start()
        start_residency(services)
        keep_warm = start_keep_warm(services)
        probe = start_replica_probe(services)
        # FastAPI prepares each included route's request handling (pydantic schemas) on
        # its first match: 30-50 ms of CPU that stalled every request in flight then.
        # Building the OpenAPI schema prepares them all, now.
        app.openapi()
        # Everything built so far lives as long as the process: move it out of the
        # collector's reach, so collections triggered by requests scan only their own
        # objects (measured: ~6% less CPU per turn).
        gc.collect()
        gc.freeze()
        log.info(
            "started",
            database=services.db.dialect,
            upstream=list(settings.upstream_replicas) or settings.upstream_base_url,
            single_tenant=settings.single_tenant,
            background_workers=settings.background_workers,
        )
        try:
            yield
        finally:
            # Jobs and detached turns get the same grace, side by side, while the database
            # and the upstream client are still open.
            grace = settings.shutdown_grace_seconds
            if keep_warm is not None:
                await keep_warm.stop()
            if probe is not None:
                await probe.stop()
            await asyncio.gather(workers.stop(grace), services.drain(grace))
            await services.close()
            # One of several `serve` workers: its in-flight gauges leave the server's sums.
            mark_this_process_dead()
            if traced:
                # Sends the spans still batched before the process ends.
                tracing.uninstall()
            log.info("stopped")

    app = FastAPI(
        title="agentic-api",
        version=__version__,
        description="OpenAI Responses API server that owns conversation state for vLLM, "
        "with the Anthropic Messages API beside it.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    # input_tokens before responses: /v1/responses/{response_id} would capture its path.
    routers = [
        module.router
        for module in (
            health,
            models,
            input_tokens,
            compact,
            responses,
            websocket,
            conversations,
            messages,
            admin,
            residency,
        )
    ]
    if settings.metrics_enabled:
        routers.append(metrics.router)
    label_tenants(settings.metrics_tenant_labels)
    for router in routers:
        app.include_router(router)
    if settings.console_enabled:
        app.include_router(console.router)
        app.state.login_limiter = LoginLimiter(
            settings.console_login_max_failures, settings.console_login_window_seconds
        )
    # What a 405 names as allowed (http/errors.py): every method declared on the path.
    app.state.api_routes = [
        route for router in routers for route in router.routes if isinstance(route, APIRoute)
    ]
    # Outermost last: the request id wraps everything, including 413s from the body check;
    # a turn's create is then served without the router (http/hot_route.py).
    install_openapi(app)
    app.add_middleware(HotRouteMiddleware, route=find_route(responses.router.routes))
    app.add_middleware(BodyMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(UrlMiddleware)
    app.add_middleware(CredentialConflictMiddleware)
    # Inside the request id (the 500 carries it and is logged as one), outside the rest.
    app.add_middleware(UnhandledErrorMiddleware)
    app.add_middleware(RequestContextMiddleware)
    # Outermost: a turn's server span covers all of its request, its stream included.
    app.add_middleware(tracing.ServerSpans)
    return app
