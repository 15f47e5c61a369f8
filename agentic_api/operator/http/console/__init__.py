"""The operator console (``/console``): server-rendered pages over what the admin API
computes, for people rather than scripts. No script runs on any page (a strict CSP says
so); sorting, filtering and paging are links and GET forms; charts are SVG images.

Transport only: login cookies and CSRF (``login_session``, ``gate``), rendering and
headers (``render``, ``headers``), the pages (``pages``), the few confirmed actions
(``actions``) and the console's own 404 for any other path (``not_found``); the charts,
SVG images drawn with ``agentic_api.charts`` (``charts``); what a page shows is gathered
by ``operator/handlers/console``.
"""

from fastapi import APIRouter

from agentic_api.operator.http.console import actions, charts, login, not_found, pages

router = APIRouter()
# not_found last: it answers whatever console path the others do not serve.
for _module in (login, pages, charts, actions, not_found):
    router.include_router(_module.router)
