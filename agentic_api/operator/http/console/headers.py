"""What every console answer carries: a strict Content-Security-Policy (no script at
all, styles and images from this origin only, forms posting only here, never framed),
no referrer to other sites (same-origin: with none at all, browsers post forms with
``Origin: null``, which the CSRF check must refuse), no caching, no sniffing."""

from __future__ import annotations

from starlette.responses import Response

PAGE_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
# Charts are SVG documents shown through <img> (which runs no script in them either);
# pygal styles them with an inline <style>, which is all they may use.
CHART_POLICY = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"


def harden(response: Response, *, policy: str = PAGE_POLICY) -> Response:
    headers = response.headers
    headers["Content-Security-Policy"] = policy
    headers["X-Frame-Options"] = "DENY"
    headers["Referrer-Policy"] = "same-origin"
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Cache-Control"] = "no-store"
    headers["Cross-Origin-Opener-Policy"] = "same-origin"
    return response
