"""Pages rendered from Jinja2 templates with autoescaping on for every template: all a
page shows of stored content (item text, metadata, tool and model names, session ids) is
attacker-controlled, so nothing reaches HTML unescaped."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from agentic_api.operator.http.console.headers import harden


def _number(value: int | float | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return f"{value:,}"


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _when(value: int | float | datetime | None) -> str:
    if value is None:
        return "—"
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"


def _latency(value: float | None) -> str:
    # Stored creation and completion times are whole seconds (the Responses API's
    # created_at / completed_at), so a latency is too: "< 1 s" rather than a false "0 ms".
    if value is None:
        return "—"
    return "< 1 s" if value < 1 else f"{value:.0f} s"


def _query(base: str, **params: Any) -> str:
    """``base`` with the given query parameters (None and "" left out), each encoded."""
    kept = {k: v for k, v in params.items() if v is not None and v != ""}
    return base + ("?" + urlencode(kept) if kept else "")


_templates = Environment(
    loader=PackageLoader("agentic_api.operator.http.console", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.filters.update(
    number=_number, percent=_percent, when=_when, seconds=_seconds, latency=_latency
)
_templates.globals.update(query=_query)


def page(request: Request, template: str, *, status: int = 200, **context: Any) -> Response:
    html = _templates.get_template(template).render(request=request, **context)
    return harden(HTMLResponse(html, status_code=status))


def redirect(url: str) -> Response:
    # 303: the browser follows with a GET, so a form is never posted twice by a reload.
    return harden(RedirectResponse(url, status_code=303))
