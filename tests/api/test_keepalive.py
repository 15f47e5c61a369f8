"""Every error path leaves the keep-alive connection usable: one httpx connection sees
400, 401, 404, 405, 413, a refused URL and an unhandled 500, then a good request, and
none of them closes it (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentic_api.app import create_app
from tests.conftest import server_settings
from tests.support.servers import ThreadedServer
from tests.support.tenants import create_tenant
from tests.upstream_sim import SimServer


@pytest.fixture
def breakable(backend: str, db_url: str, sim: SimServer, tmp_path: Path) -> Iterator[str]:
    """Our app, plus one route that fails the way only a bug would."""
    app = create_app(server_settings(db_url, sim.url, tmp_path, max_body_bytes=4096))

    @app.get("/v1/test-only/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    running = ThreadedServer(app).start()
    try:
        yield running.url
    finally:
        running.stop()


def client_port(response: httpx.Response) -> object:
    stream = response.extensions["network_stream"]
    return stream.get_extra_info("client_addr")


def test_errors_keep_the_connection(breakable: str, db_url: str, sim: SimServer) -> None:
    tenant = create_tenant(db_url)
    auth = {"authorization": f"Bearer {tenant.api_key}"}
    with httpx.Client(
        base_url=breakable, timeout=20, limits=httpx.Limits(max_connections=1)
    ) as http:
        first = http.get("/health")
        port = client_port(first)
        attempts = [
            (400, lambda: http.post("/v1/responses", headers=auth, json={"model": 5})),
            (401, lambda: http.get("/v1/models")),
            (404, lambda: http.get("/v1/nothing-here", headers=auth)),
            (404, lambda: http.get("/v1/responses/resp_x", headers=auth)),
            (405, lambda: http.put("/v1/responses", headers=auth)),
            (413, lambda: http.post("/v1/responses", headers=auth, content=b"x" * 10_000)),
            (400, lambda: http.get("/v1/responses/a%00b", headers=auth)),
            (500, lambda: http.get("/v1/test-only/boom", headers=auth)),
        ]
        for status, attempt in attempts:
            response = attempt()
            name = f"{response.request.method} {response.request.url.path}"
            assert response.status_code == status, name
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}, name
            closes = response.headers.get("connection", "").lower() == "close"
            after = http.get("/health")
            assert after.status_code == 200, name
            if not closes:
                assert client_port(after) == port, f"{name}: the connection was dropped"
            port = client_port(after)
        good = http.post(
            "/v1/responses", headers=auth, json={"model": sim.config.model, "input": "x"}
        )
        assert good.status_code == 200, good.text


def test_an_unhandled_error_is_an_ordinary_500(breakable: str) -> None:
    response = httpx.get(f"{breakable}/v1/test-only/boom")
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"
    assert response.headers.get("x-request-id", "").startswith("req_")
    assert response.headers.get("connection", "").lower() != "close"
