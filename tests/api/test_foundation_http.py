"""The HTTP skeleton: health, readiness, auth, error shapes, request ids, body limits."""

from __future__ import annotations

import gzip

import httpx
import pytest
import zstandard

from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys
from tests.upstream_sim import SimServer


def assert_openai_error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


def test_health_and_request_id(server: RunningServer) -> None:
    response = httpx.get(f"{server.url}/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response.headers["x-request-id"].startswith("req_")
    other = httpx.get(f"{server.url}/health")
    assert other.headers["x-request-id"] != response.headers["x-request-id"]


def test_ready_reports_database_and_upstream(server: RunningServer) -> None:
    response = httpx.get(f"{server.url}/ready")
    assert response.status_code == 200, response.text
    assert response.json()["database"] == {"ok": True}
    assert response.json()["upstream"] == {"ok": True}


def test_missing_and_wrong_keys_are_401(server: RunningServer) -> None:
    error = assert_openai_error(httpx.get(f"{server.url}/v1/models"), 401)
    assert error["code"] == "missing_api_key"
    wrong = httpx.get(f"{server.url}/v1/models", headers={"authorization": "Bearer sk-nope"})
    assert assert_openai_error(wrong, 401)["code"] == "invalid_api_key"


def test_models_are_proxied(server: RunningServer, tenant: TenantKeys, sim: SimServer) -> None:
    response = httpx.get(
        f"{server.url}/v1/models", headers={"authorization": f"Bearer {tenant.api_key}"}
    )
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == [sim.config.model]


def test_unknown_route_and_method_are_openai_errors(server: RunningServer) -> None:
    assert assert_openai_error(httpx.get(f"{server.url}/v1/nothing"), 404)["code"] == "not_found"
    error = assert_openai_error(httpx.put(f"{server.url}/health"), 405)
    assert error["code"] == "method_not_allowed"


def test_body_limit_is_413(server: RunningServer, tenant: TenantKeys) -> None:
    big = b"x" * (server.settings.max_body_bytes + 1)
    response = httpx.post(
        f"{server.url}/v1/responses",
        content=big,
        headers={"authorization": f"Bearer {tenant.api_key}", "content-type": "application/json"},
    )
    assert assert_openai_error(response, 413)["code"] == "request_too_large"


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_compressed_bodies_are_accepted(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, encoding: str
) -> None:
    body = b'{"model": "%s", "input": "hello compressed", "max_output_tokens": 8}' % (
        sim.config.model.encode()
    )
    packed = gzip.compress(body) if encoding == "gzip" else zstandard.compress(body)
    response = httpx.post(
        f"{server.url}/v1/responses",
        content=packed,
        headers={
            "authorization": f"Bearer {tenant.api_key}",
            "content-type": "application/json",
            "content-encoding": encoding,
        },
        timeout=20,
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] in ("completed", "incomplete")


def test_compression_bomb_is_413(server: RunningServer, tenant: TenantKeys) -> None:
    packed = zstandard.compress(b" " * (server.settings.max_body_bytes + 10))
    response = httpx.post(
        f"{server.url}/v1/responses",
        content=packed,
        headers={
            "authorization": f"Bearer {tenant.api_key}",
            "content-type": "application/json",
            "content-encoding": "zstd",
        },
    )
    assert_openai_error(response, 413)
