"""Logging in with an admin key, and out."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from starlette.responses import Response

from agentic_api.http.auth import services_of
from agentic_api.operator.handlers.console.access import (
    admin_key_for,
    console_open,
    end_login,
    login_key_prefix,
)
from agentic_api.operator.http.console.gate import (
    form_fields,
    is_tls,
    now,
    same_origin,
    signer,
    viewer,
)
from agentic_api.operator.http.console.login_limit import LoginLimiter
from agentic_api.operator.http.console.login_session import (
    LOGIN_COOKIE,
    LOGIN_SECONDS,
    SESSION_COOKIE,
)
from agentic_api.operator.http.console.render import page, redirect

router = APIRouter(prefix="/console", include_in_schema=False)


def _set_cookie(request: Request, response: Response, name: str, value: str, age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=age,
        path="/console",
        httponly=True,
        secure=is_tls(request),
        samesite="strict",
    )


def _forget(request: Request, response: Response, name: str) -> None:
    response.delete_cookie(
        name, path="/console", httponly=True, secure=is_tls(request), samesite="strict"
    )


async def _form(request: Request, *, status: int = 200, error: str | None = None) -> Response:
    """The login form, with a fresh pre-login cookie and the token bound to it."""
    sign = signer(request)
    cookie = sign.login_nonce(now=now())
    response = page(
        request,
        "login.html",
        viewer=None,
        status=status,
        error=error,
        login_token=sign.login_token(cookie),
    )
    _set_cookie(request, response, LOGIN_COOKIE, cookie, LOGIN_SECONDS)
    return response


def _closed(request: Request) -> Response:
    # No admin key exists: the console is not there at all.
    return page(request, "error.html", viewer=None, status=404, message="Not found.")


@router.get("/login")
async def login_form(request: Request) -> Response:
    if not await console_open(services_of(request)):
        return _closed(request)
    if await viewer(request) is not None:
        return redirect("/console")
    return await _form(request)


@router.post("/login")
async def login(request: Request) -> Response:
    services = services_of(request)
    if not await console_open(services):
        return _closed(request)
    fields = await form_fields(request)
    sign = signer(request)
    if (
        fields is None
        or not same_origin(request)
        or not sign.login_ok(
            request.cookies.get(LOGIN_COOKIE), fields.get("login_token"), now=now()
        )
    ):
        return await _form(request, status=403, error="The form expired; please try again.")
    typed = fields.get("admin_key", "").strip()
    limiter: LoginLimiter = request.app.state.login_limiter
    address = request.client.host if request.client is not None else ""
    prefix = login_key_prefix(typed)
    wait = limiter.retry_after(address, prefix, time.monotonic())
    if wait is not None:
        # Before the key is looked at: while limited, the right key is refused too.
        limited = await _form(
            request,
            status=429,
            error=f"Too many failed logins; try again in {wait} s.",
        )
        limited.headers["Retry-After"] = str(wait)
        return limited
    key_id = await admin_key_for(services, typed)
    if key_id is None:
        limiter.failed(address, prefix, time.monotonic())
        return await _form(request, status=401, error="That is not an active admin key.")
    limiter.succeeded(address)
    response = redirect("/console")
    lifetime = services.settings.console_session_seconds
    _set_cookie(
        request,
        response,
        SESSION_COOKIE,
        sign.issue(key_id, now=now(), lifetime=lifetime),
        lifetime,
    )
    _forget(request, response, LOGIN_COOKIE)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    who = await viewer(request)
    fields = await form_fields(request)
    if who is not None and (
        fields is None
        or not same_origin(request)
        or not signer(request).csrf_ok(who.login, fields.get("csrf_token"))
    ):
        return page(request, "error.html", viewer=who, status=403, message="Forged logout refused.")
    if who is not None:
        # Recorded before the cookie is cleared: a copy of it is refused from now on too.
        await end_login(services_of(request), who.login.nonce, expires=who.login.expires, now=now())
    response = redirect("/console/login")
    _forget(request, response, SESSION_COOKIE)
    return response
