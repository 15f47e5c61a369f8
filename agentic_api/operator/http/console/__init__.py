"""The operator console (``/console``): server-rendered pages over what the admin API
computes, for people rather than scripts. No script runs on any page (a strict CSP says
so); sorting, filtering and paging are links and GET forms; charts are SVG images.

Transport only: login cookies and CSRF (``login_session``, ``gate``), rendering and
headers (``render``, ``headers``), the pages (``pages``) and the few confirmed actions
(``actions``); the charts, SVG images drawn with ``agentic_api.charts``
(``charts``); what a page shows is gathered by ``operator/handlers/console``.
"""

from fastapi import APIRouter

from agentic_api.operator.http.console import actions, charts, login, pages

router = APIRouter()
for _module in (login, pages, charts, actions):
    router.include_router(_module.router)
