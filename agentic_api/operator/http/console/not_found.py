"""Any other ``/console/…`` path: the console's own 404 page (or 405, for a console path
asked with a method it does not serve), with every console page's headers, where the API's
JSON 404 would otherwise answer without them. Included last: it matches what nothing
before it did."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.routing import Match

from agentic_api.operator.http.console import actions, charts, login, pages
from agentic_api.operator.http.console.render import page

router = APIRouter(prefix="/console", include_in_schema=False)

_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _allowed(request: Request) -> list[str]:
    """The methods the console's own routes serve on this path (empty: no such page)."""
    probe = {**request.scope, "method": ""}
    methods: set[str] = set()
    for module in (login, pages, charts, actions):
        for route in module.router.routes:
            # PARTIAL: the path is the route's, the method is not.
            if isinstance(route, APIRoute) and route.matches(probe)[0] is Match.PARTIAL:
                methods.update(route.methods or ())
    return sorted(methods)


@router.api_route("/{rest:path}", methods=_METHODS)
async def unknown_console_path(request: Request) -> Response:
    allowed = _allowed(request)
    if allowed:
        answer = page(
            request,
            "error.html",
            viewer=None,
            status=405,
            message=f"{request.method} is not allowed here.",
        )
        answer.headers["Allow"] = ", ".join(allowed)
        return answer
    return page(request, "error.html", viewer=None, status=404, message="Not found.")
