"""``POST /v1/responses`` — every turn — dispatched without FastAPI's router.

Matching the path through FastAPI's included routers and running its request handling
(dependency solving, the route's wrappers) touches a lot of code on every turn. In the
overhead benchmark, where each turn runs after ~30 ms of waiting with caches gone cold,
serving this one route directly cut the server's CPU per turn by ~12% and its added
latency by ~0.5 ms (docs/benchmarks/overhead/README.md); in a warm loop the difference is lost in
noise. This middleware recognizes that route and calls the same endpoint function after
the same authentication. Nothing else changes: it sits inside the request-id /
access-log and body-limit middleware, errors are rendered by the same functions as
everywhere else, and the route stays declared (and documented) on its router, which
serves it whenever this middleware is not installed.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from agentic_api.errors import ApiError
from agentic_api.http.auth import require_tenant
from agentic_api.http.errors import error_response, unexpected_error_response
from agentic_api.http.routes.responses import create_response

PATH = "/v1/responses"


class HotRouteMiddleware:
    def __init__(self, app: ASGIApp, *, route: APIRoute) -> None:
        self.app = app
        # Put in the scope as the router would (the metrics' route label reads it).
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or _route_path(scope) != PATH:
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route
        request = Request(scope, receive)
        try:
            response = await create_response(request, await require_tenant(request))
        except ApiError as exc:
            response = error_response(exc)
        except Exception:
            response = unexpected_error_response(request)
        await response(scope, receive, send)


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def find_route(routes: Sequence[BaseRoute]) -> APIRoute:
    """The declared ``POST /v1/responses`` route."""
    for route in routes:
        if isinstance(route, APIRoute) and route.path == PATH and "POST" in (route.methods or ()):
            return route
    raise LookupError(f"no POST {PATH} route is declared")
