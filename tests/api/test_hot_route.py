"""``POST /v1/responses`` is served by http/hot_route.py, not FastAPI's router, and nobody
can tell the difference: same answers, same errors, same metrics label."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from agentic_api.app import create_app
from agentic_api.http import hot_route
from tests.conftest import server_settings
from tests.support.clients import openai_client
from tests.support.databases import sqlite_url
from tests.support.servers import ThreadedServer
from tests.support.tenants import create_tenant
from tests.upstream_sim import Reply, SimServer


@pytest.fixture
def served(
    sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str, list[tuple[str, str]]]]:
    """Our app, with every request that FastAPI's router tries to match recorded."""
    from agentic_api.storage.migrate import upgrade

    routed: list[tuple[str, str]] = []
    matches = APIRoute.matches
    url = sqlite_url(tmp_path)
    upgrade(url)
    app = create_app(server_settings(url, sim.url, tmp_path))

    def recording(route: APIRoute, scope: Any) -> Any:
        # (The simulator, in this process too, routes its own requests.)
        if scope["type"] == "http" and scope.get("app") is app:
            routed.append((scope["method"], scope["path"]))
        return matches(route, scope)

    monkeypatch.setattr(APIRoute, "matches", recording)
    running = ThreadedServer(app).start()
    try:
        yield running.url, create_tenant(url).api_key, routed
    finally:
        running.stop()


def test_creates_skip_the_router_and_everything_else_goes_through_it(
    served: tuple[str, str, list[tuple[str, str]]], sim: SimServer
) -> None:
    url, key, routed = served
    client = openai_client(f"{url}/v1", key)
    sim.push(Reply("one"), Reply("two"))
    first = client.responses.create(model=sim.config.model, input="hi")
    second = client.responses.create(
        model=sim.config.model, input="again", previous_response_id=first.id
    )
    assert second.output_text == "two"
    assert client.responses.retrieve(second.id).id == second.id
    assert ("POST", "/v1/responses") not in routed
    assert ("GET", f"/v1/responses/{second.id}") in routed
    metrics = httpx.get(f"{url}/metrics").text
    assert 'agentic_http_requests_total{method="POST",route="/v1/responses",status="200"}' in (
        metrics
    )


def test_errors_are_the_same_as_everywhere_else(
    served: tuple[str, str, list[tuple[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, key, _routed = served
    missing = httpx.post(f"{url}/v1/responses", json={"model": "m", "input": "x"})
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "missing_api_key"
    headers = {"authorization": f"Bearer {key}"}
    bad = httpx.post(f"{url}/v1/responses", content=b"{not json", headers=headers)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"

    async def explode(*_args: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(hot_route, "create_response", explode)
    broken = httpx.post(f"{url}/v1/responses", json={"model": "m", "input": "x"}, headers=headers)
    assert broken.status_code == 500
    body = broken.json()["error"]
    assert body["type"] == "server_error"
    assert broken.headers["x-request-id"] in body["message"]
    assert "boom" not in broken.text


def test_the_route_it_serves_is_the_declared_one() -> None:
    from agentic_api.http.routes import responses

    route = hot_route.find_route(responses.router.routes)
    assert route.endpoint is responses.create_response
    with pytest.raises(LookupError):
        hot_route.find_route([])
