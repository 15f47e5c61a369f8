"""The console's read-only pages: tenants, a tenant (cache statistics and its sessions),
a session's timeline, a response with its items, its lineage, residency, background jobs
and recorded Messages turns. Each gathers its data with one ``operator/handlers/console`` call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, get_args

from fastapi import APIRouter, Request
from starlette.responses import Response

from agentic_api.http.auth import services_of
from agentic_api.operator.handlers.admin.residency import annotate_timeline, session_residency
from agentic_api.operator.handlers.console.jobs import JobState, list_jobs, list_message_turns
from agentic_api.operator.handlers.console.lineage import response_lineage
from agentic_api.operator.handlers.console.residency import recent_sessions
from agentic_api.operator.handlers.console.responses import response_detail
from agentic_api.operator.handlers.console.sessions import SessionFilter, SessionSort, list_sessions
from agentic_api.operator.handlers.console.tenants import SPANS, list_tenants, tenant_overview
from agentic_api.operator.handlers.console.timeline import session_timeline
from agentic_api.operator.http.console.gate import Viewer, viewer
from agentic_api.operator.http.console.headers import harden
from agentic_api.operator.http.console.params import (
    BadParameter,
    choice,
    flag,
    identifier,
    integer,
    text,
)
from agentic_api.operator.http.console.render import page, redirect
from agentic_api.operator.http.console.tree import tree_rows

router = APIRouter(prefix="/console", include_in_schema=False)

PAGE_SIZE = 50
MAX_PAGE = 10_000
SORTS: tuple[SessionSort, ...] = get_args(SessionSort)
JOB_STATES: tuple[JobState, ...] = get_args(JobState)

Page = Callable[[Request, Viewer], Awaitable[Response]]


def signed_in(handler: Page) -> Callable[[Request], Awaitable[Response]]:
    """Runs the page for a valid login; sends anyone else to the login form, and turns a
    bad query parameter into a 400 page."""

    # Not functools.wraps: FastAPI would read the handler's signature through it and
    # take ``who`` for a query parameter.
    async def run(request: Request) -> Response:
        who = await viewer(request)
        if who is None:
            return redirect("/console/login")
        try:
            return await handler(request, who)
        except BadParameter as exc:
            return page(request, "error.html", viewer=who, status=400, message=str(exc))

    run.__name__ = handler.__name__
    run.__doc__ = handler.__doc__
    return run


def not_found(request: Request, who: Viewer, what: str) -> Response:
    return page(request, "error.html", viewer=who, status=404, message=f"No {what}.")


def _offset(request: Request) -> tuple[int, int]:
    number = integer(request, "page", default=1, low=1, high=MAX_PAGE)
    return number, (number - 1) * PAGE_SIZE


@router.get("")
@signed_in
async def tenants(request: Request, who: Viewer) -> Response:
    number, offset = _offset(request)
    found = await list_tenants(services_of(request), offset=offset, limit=PAGE_SIZE)
    return page(
        request, "tenants.html", viewer=who, tenants=found, page_number=number, size=PAGE_SIZE
    )


@router.get("/tenants/{tenant_id}")
@signed_in
async def tenant(request: Request, who: Viewer) -> Response:
    tenant_id: str = request.path_params["tenant_id"]
    span = choice(request, "span", tuple(SPANS), "24h")
    sort = choice(request, "sort", SORTS, "last_activity")
    order = choice(request, "order", ("asc", "desc"), "desc")
    filters = SessionFilter(
        contains=text(request, "q"),
        model=text(request, "model"),
        min_turns=integer(request, "min_turns", default=1, low=1, high=1_000_000),
        lossy=flag(request, "lossy"),
    )
    number, offset = _offset(request)
    services = services_of(request)
    overview = await tenant_overview(services, tenant_id, span)
    if overview is None:
        return not_found(request, who, "such tenant")
    sessions = await list_sessions(
        services,
        tenant_id,
        filters,
        sort=sort,
        descending=order == "desc",
        offset=offset,
        limit=PAGE_SIZE,
    )
    assert sessions is not None  # the tenant was just read
    return page(
        request,
        "tenant.html",
        viewer=who,
        overview=overview,
        sessions=sessions,
        filters=filters,
        sort=sort,
        order=order,
        sorts=SORTS,
        spans=tuple(SPANS),
        page_number=number,
        size=PAGE_SIZE,
    )


@router.get("/tenants/{tenant_id}/timeline")
@signed_in
async def timeline(request: Request, who: Viewer) -> Response:
    tenant_id: str = request.path_params["tenant_id"]
    session_id = text(request, "session")
    if session_id is None:
        raise BadParameter("session", "is required")
    services = services_of(request)
    found = await session_timeline(
        services, tenant_id, session_id, after=identifier(request, "after"), limit=PAGE_SIZE
    )
    if found is None:
        return not_found(request, who, "such session")
    # The residency cause comes from this process's KV-event tracker, exactly as the
    # admin timeline adds it.
    for part in found.comparisons:
        annotate_timeline(part.shown, part.rows, part.before, services.residency)
    return page(request, "timeline.html", viewer=who, timeline=found)


@router.get("/responses/{response_id}")
@signed_in
async def response(request: Request, who: Viewer) -> Response:
    after = integer(request, "after", default=-1, low=0, high=2**31 - 1)
    found = await response_detail(
        services_of(request),
        request.path_params["response_id"],
        after_position=None if after < 0 else after,
        limit=PAGE_SIZE,
    )
    if found is None:
        return not_found(request, who, "such response")
    return page(request, "response.html", viewer=who, detail=found)


@router.get("/responses/{response_id}/lineage")
@signed_in
async def lineage(request: Request, who: Viewer) -> Response:
    found = await response_lineage(services_of(request), request.path_params["response_id"])
    if found is None:
        return not_found(request, who, "such response")
    return page(
        request, "lineage.html", viewer=who, lineage=found, rows=tree_rows(found.descendants)
    )


@router.get("/tenants/{tenant_id}/residency")
@signed_in
async def residency(request: Request, who: Viewer) -> Response:
    services = services_of(request)
    found = await recent_sessions(services, request.path_params["tenant_id"], limit=PAGE_SIZE)
    if found is None:
        return not_found(request, who, "such tenant")
    views = [session_residency(o, services.residency, services.secret, None) for o in found.owners]
    by_replica: dict[str, list[tuple[Any, Any]]] = {}
    for view in views:
        for replica in view.replicas:
            by_replica.setdefault(replica.replica, []).append((view, replica))
    return page(
        request,
        "residency.html",
        viewer=who,
        tenant=found.tenant,
        tracking=services.residency is not None,
        by_replica=by_replica,
    )


@router.get("/jobs")
@signed_in
async def jobs(request: Request, who: Viewer) -> Response:
    state = choice(request, "state", JOB_STATES, "queued")
    number, offset = _offset(request)
    found = await list_jobs(services_of(request), state, offset=offset, limit=PAGE_SIZE)
    return page(request, "jobs.html", viewer=who, jobs=found, states=JOB_STATES, page_number=number)


@router.get("/tenants/{tenant_id}/message_turns")
@signed_in
async def message_turns(request: Request, who: Viewer) -> Response:
    found = await list_message_turns(
        services_of(request),
        request.path_params["tenant_id"],
        after=identifier(request, "after"),
        limit=PAGE_SIZE,
    )
    if found is None:
        return not_found(request, who, "such tenant")
    return page(request, "message_turns.html", viewer=who, turns=found)


_STYLESHEET = resources.files(__package__).joinpath("static/console.css").read_bytes()


@router.get("/static/console.css")
async def stylesheet() -> Response:
    response = harden(Response(_STYLESHEET, media_type="text/css"))
    response.headers["Cache-Control"] = "public, max-age=3600"
    return response
