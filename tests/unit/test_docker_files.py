"""docker/compose.yaml and docker/Dockerfile describe the stack docs/deploy.md promises.

No Docker engine runs in CI, so these tests read the files: the compose file with a YAML
parser (what `docker compose config` would load), the Dockerfile with a small instruction
reader. They pin the parts the deployment relies on: migrations before the server, the
production settings, prefix caching on vLLM, a GPU, health checks, a non-root image.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentic_api.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]  # type: ignore[no-any-return]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the KEY=VALUE list form
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def command_words(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(w) for w in command]


def test_the_stack_has_its_four_services(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) >= {"postgres", "vllm", "migrate", "server"}


def test_the_server_starts_only_after_a_successful_migration(
    services: dict[str, dict[str, Any]],
) -> None:
    server = services["server"]["depends_on"]
    assert server["migrate"]["condition"] == "service_completed_successfully"
    assert server["postgres"]["condition"] == "service_healthy"
    assert "vllm" in server
    migrate = services["migrate"]
    assert command_words(migrate) == ["migrate"]
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert migrate.get("restart", "no") == "no"


def test_migration_and_server_run_the_same_image_on_the_same_database(
    services: dict[str, dict[str, Any]],
) -> None:
    migrate, server = services["migrate"], services["server"]
    assert migrate["image"] == server["image"]
    assert migrate["build"] == server["build"]
    build = server["build"]
    assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    url = environment(server)["AGENTIC_DATABASE_URL"]
    assert url == environment(migrate)["AGENTIC_DATABASE_URL"]
    assert url.startswith("postgresql://") and "@postgres:5432/" in url
    assert command_words(server) in ([], ["serve"])


def test_the_server_runs_in_production_mode_against_vllm(
    services: dict[str, dict[str, Any]],
) -> None:
    env = environment(services["server"])
    assert env["AGENTIC_PRODUCTION"] == "1"
    assert env["AGENTIC_UPSTREAM_BASE_URL"] == "http://vllm:8000"
    # Required from the operator (compose refuses to start without it), never a default.
    assert re.fullmatch(r"\$\{AGENTIC_SERVER_SECRET:\?[^}]*\}", env["AGENTIC_SERVER_SECRET"])
    assert any(str(port).endswith(":8080") for port in services["server"]["ports"])


def test_every_agentic_variable_in_compose_is_a_setting(
    services: dict[str, dict[str, Any]],
) -> None:
    fields = {name.upper() for name in Settings.model_fields}
    for name in ("migrate", "server"):
        for key in environment(services[name]):
            assert key.startswith("AGENTIC_"), key
            assert key.removeprefix("AGENTIC_") in fields, f"{name}: unknown setting {key}"


def test_vllm_uses_the_gpu_image_with_prefix_caching(
    services: dict[str, dict[str, Any]],
) -> None:
    vllm = services["vllm"]
    assert str(vllm["image"]).startswith("vllm/vllm-openai:")
    words = command_words(vllm)
    assert "--enable-prefix-caching" in words
    assert "--enable-prompt-tokens-details" in words
    assert words[words.index("--port") + 1] == "8000"
    assert any(str(volume).split(":")[0] == "models" for volume in vllm["volumes"])
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)


def test_long_running_services_have_health_checks(
    services: dict[str, dict[str, Any]],
) -> None:
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "/health" in " ".join(services["vllm"]["healthcheck"]["test"])
    assert "/health" in " ".join(services["server"]["healthcheck"]["test"])


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    assert {"pgdata", "models"} <= set(compose["volumes"])


def test_every_variable_compose_reads_is_in_env_example() -> None:
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", COMPOSE.read_text(encoding="utf-8")))
    example = (DOCKER / ".env.example").read_text(encoding="utf-8")
    listed = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", example, flags=re.MULTILINE))
    assert used <= listed, f"missing from docker/.env.example: {sorted(used - listed)}"


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions (KEYWORD, arguments) per build stage; continuation lines joined."""
    stages: list[list[tuple[str, str]]] = []
    logical = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        keyword, _, rest = logical.partition(" ")
        logical = ""
        if keyword.upper() == "FROM":
            stages.append([])
        stages[-1].append((keyword.upper(), rest.strip()))
    return stages


def final_stage() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for keyword, rest in dockerfile_stages()[-1]:
        found.setdefault(keyword, []).append(rest)
    return found


def test_dockerfile_runs_the_cli_as_a_non_root_user() -> None:
    stage = final_stage()
    assert json.loads(stage["ENTRYPOINT"][-1]) == ["agentic-api"]
    assert json.loads(stage["CMD"][-1]) == ["serve"]
    user = stage["USER"][-1].split(":")[0]
    assert user not in ("root", "0")
    assert "8080" in stage["EXPOSE"][-1].split()


def test_dockerfile_has_a_health_check_on_health() -> None:
    check = final_stage()["HEALTHCHECK"][-1]
    assert " CMD " in f" {check} " and "/health" in check


def test_dockerfile_copies_only_what_exists() -> None:
    for stage in dockerfile_stages():
        for keyword, rest in stage:
            if keyword != "COPY" or rest.startswith("--from"):
                continue
            *sources, _target = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
