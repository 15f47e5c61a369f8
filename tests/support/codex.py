"""Running the real Codex CLI (``@openai/codex``, pinned in scripts/install_codex.sh)
against our server: installing it, its configuration, one ``codex exec`` run."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys

REPO = Path(__file__).resolve().parents[2]
KEY_VARIABLE = "AGENTIC_CODEX_TEST_KEY"


def codex_binary() -> str:
    # Installs the pinned CLI on first use (npm); a missing toolchain fails the test.
    result = subprocess.run(
        [str(REPO / "scripts" / "install_codex.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return result.stdout.strip().splitlines()[-1]


@dataclass(frozen=True)
class Provider:
    """How Codex is pointed at us: a custom provider (``name`` is what Codex reads to
    decide whether the provider compacts remotely: "OpenAI" or "azure" do), or the
    built-in ``openai`` provider with ``openai_base_url``."""

    name: str = "agentic"
    websockets: bool = False
    builtin: bool = False

    def config(self, server: RunningServer, model: str) -> str:
        if self.builtin:
            return (
                f'model = "{model}"\nmodel_provider = "openai"\n'
                f'openai_base_url = "{server.url}/v1"\n'
            )
        return (
            f'model = "{model}"\nmodel_provider = "agentic"\n'
            "[model_providers.agentic]\n"
            f'name = "{self.name}"\n'
            f'base_url = "{server.url}/v1"\n'
            'wire_api = "responses"\n'
            f'env_key = "{KEY_VARIABLE}"\n'
            + ("supports_websockets = true\n" if self.websockets else "")
        )


def run_codex(
    binary: str,
    workdir: Path,
    server: RunningServer,
    tenant: TenantKeys,
    model: str,
    task: str,
    *,
    provider: Provider,
    extra_config: str = "",
) -> subprocess.CompletedProcess[str]:
    home = workdir / "codex-home"
    home.mkdir()
    # Top-level keys must precede the provider's table.
    (home / "config.toml").write_text(extra_config + provider.config(server, model))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEX"))}
    env.update(CODEX_HOME=str(home), **{KEY_VARIABLE: tenant.api_key})
    if provider.builtin:
        env["CODEX_API_KEY"] = tenant.api_key
    return subprocess.run(
        [binary, "exec", "--skip-git-repo-check", task],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def websocket_upgrades(server: RunningServer) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    for line in text.splitlines():
        if line.startswith("agentic_http_requests_total{") and 'method="WS"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
