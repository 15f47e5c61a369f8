"""Who is looking, and whether a form really comes from a console page.

A page is shown only to a valid login (``login_session``) whose admin key is still
active and that has not logged out. A form post must come from this origin
(``Sec-Fetch-Site`` / ``Origin``, when the browser sends them) *and* carry the session's
CSRF token: either alone would stop the usual cross-site post, both together also stop a
browser that omits the headers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import parse_qsl

from starlette.requests import Request

from agentic_api.http.auth import services_of
from agentic_api.operator.handlers.console.access import login_active
from agentic_api.operator.http.console.login_session import (
    SESSION_COOKIE,
    ConsoleLogin,
    SessionSigner,
)

# A console form has a handful of fields; anything bigger is not one of ours.
_MAX_FORM_BYTES = 4096


@dataclass(frozen=True)
class Viewer:
    login: ConsoleLogin
    csrf_token: str


def now() -> int:
    return int(time.time())


def signer(request: Request) -> SessionSigner:
    return SessionSigner(services_of(request).secret)


def is_tls(request: Request) -> bool:
    return request.url.scheme == "https"


async def viewer(request: Request) -> Viewer | None:
    sign = signer(request)
    login = sign.read(request.cookies.get(SESSION_COOKIE), now=now())
    if login is None or not await login_active(services_of(request), login.key_id, login.nonce):
        return None
    return Viewer(login, sign.csrf_token(login))


def same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return False
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.url.netloc}"
    return origin is None or origin == own


async def form_fields(request: Request) -> dict[str, str] | None:
    """The posted urlencoded form (first value of each field), or None when the body is
    not one of our forms."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return None
    body = await request.body()
    if len(body) > _MAX_FORM_BYTES:
        return None
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=16)
    except (UnicodeDecodeError, ValueError):
        return None
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(name, value)
    return fields
