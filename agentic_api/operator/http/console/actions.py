"""The console's only writes: a tenant action (disable, enable, rotate salt, purge),
each shown first on a confirmation page and done only by its form: the session's CSRF
token, this origin, and the tenant's name typed again."""

from __future__ import annotations

from typing import get_args

from fastapi import APIRouter, Request
from starlette.responses import Response

from agentic_api.http.auth import services_of
from agentic_api.operator.handlers.console.actions import (
    ACTIONS,
    Action,
    apply_action,
    tenant_for_action,
)
from agentic_api.operator.http.console.gate import form_fields, same_origin, signer, viewer
from agentic_api.operator.http.console.render import page, redirect
from agentic_api.serving.tenants import KeyMemo

router = APIRouter(prefix="/console", include_in_schema=False)


def _action(name: str) -> Action | None:
    for action in get_args(Action):
        if name == action:
            return action  # type: ignore[no-any-return]
    return None


@router.get("/tenants/{tenant_id}/actions/{action}")
async def confirm(request: Request) -> Response:
    who = await viewer(request)
    if who is None:
        return redirect("/console/login")
    action = _action(request.path_params["action"])
    tenant = await tenant_for_action(services_of(request), request.path_params["tenant_id"])
    if action is None or tenant is None:
        return page(request, "error.html", viewer=who, status=404, message="No such action.")
    return page(
        request,
        "confirm.html",
        viewer=who,
        tenant=tenant,
        action=action,
        description=ACTIONS[action],
        error=None,
    )


@router.post("/tenants/{tenant_id}/actions/{action}")
async def act(request: Request) -> Response:
    who = await viewer(request)
    if who is None:
        return page(request, "error.html", viewer=None, status=401, message="Log in first.")
    fields = await form_fields(request)
    if (
        fields is None
        or not same_origin(request)
        or not signer(request).csrf_ok(who.login, fields.get("csrf_token"))
    ):
        return page(
            request,
            "error.html",
            viewer=who,
            status=403,
            message="Refused: the form did not come from this console. Nothing was changed.",
        )
    services = services_of(request)
    action = _action(request.path_params["action"])
    tenant = await tenant_for_action(services, request.path_params["tenant_id"])
    if action is None or tenant is None:
        return page(request, "error.html", viewer=who, status=404, message="No such action.")
    if fields.get("confirm_name") != tenant.name:
        return page(
            request,
            "confirm.html",
            viewer=who,
            status=400,
            tenant=tenant,
            action=action,
            description=ACTIONS[action],
            error="The name typed does not match the tenant's. Nothing was changed.",
        )
    done = await apply_action(services, tenant.id, action)
    if done is None:
        return page(request, "error.html", viewer=who, status=404, message="No such tenant.")
    # A disable or rotation must bite on the next request (keys are cached for seconds).
    memo: KeyMemo = request.app.state.key_memo
    memo.clear()
    return page(request, "done.html", viewer=who, done=done, action=action)
