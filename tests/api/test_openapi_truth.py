"""``/openapi.json`` is true to the server (client generators and the fuzz tier read it):
every reference resolves, errors are documented as the 400/401/404 the server answers
(never FastAPI's 422), and each path's 405 names exactly the documented methods."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys

PUBLIC = {"/health", "/ready", "/metrics"}
METHODS = {"get", "post", "put", "patch", "delete", "head", "options", "trace"}


@pytest.fixture(scope="module")
def document(server: RunningServer) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


def resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    found = refs(document)
    assert found
    for ref in found:
        assert resolve(document, ref) is not None, ref
    assert "$defs" not in str(document)


def test_errors_are_documented_as_answered(document: dict[str, Any]) -> None:
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            where = f"{method.upper()} {path}"
            assert "422" not in responses, where
            assert "400" in responses, where
            if path not in PUBLIC:
                assert {"401", "404"} <= set(responses), where
            shape = "AnthropicErrorBody" if path.startswith("/v1/messages") else "ErrorBody"
            for status, entry in responses.items():
                if status in ("400", "401", "404"):
                    schema = entry["content"]["application/json"]["schema"]
                    assert schema == {"$ref": f"#/components/schemas/{shape}"}, where


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


def template(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$")


def test_405_names_every_documented_method(
    server: RunningServer, tenant: TenantKeys, document: dict[str, Any]
) -> None:
    paths = document["paths"]
    for path in paths:
        # A concrete path can match several templates (``/v1/responses/input_tokens`` is
        # also ``/v1/responses/{response_id}``): it is served with all their methods.
        documented = {
            m.upper()
            for other, operations in paths.items()
            if template(other).match(concrete(path))
            for m in operations
            if m in METHODS
        }
        response = httpx.request(
            "OPTIONS",
            f"{server.url}{concrete(path)}",
            headers={"authorization": f"Bearer {tenant.api_key}"},
        )
        assert response.status_code == 405, path
        allowed = {m.strip() for m in response.headers["allow"].split(",")}
        assert allowed == documented, path
        if path.startswith("/v1/messages"):
            assert response.json()["type"] == "error"  # Anthropic's shape there
        else:
            assert response.json()["error"]["code"] == "method_not_allowed"


def test_documented_validation_errors_are_400s(server: RunningServer, tenant: TenantKeys) -> None:
    auth = {"authorization": f"Bearer {tenant.api_key}"}
    for url in (
        "/v1/conversations/conv_x/items?limit=0",
        "/v1/responses/resp_x/input_items?order=sideways",
        "/v1/responses/resp_x?starting_after=abc",
    ):
        response = httpx.get(f"{server.url}{url}", headers=auth)
        assert response.status_code == 400, url
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
