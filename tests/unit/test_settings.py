"""Settings: the generated secret, production rules and the single-tenant guard."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentic_api.settings import ConfigError, Settings


def test_secret_is_generated_once_and_persisted(tmp_path: Path) -> None:
    first = Settings(data_dir=tmp_path).load_server_secret()
    again = Settings(data_dir=tmp_path).load_server_secret()
    assert first == again and len(first) == 64
    assert (tmp_path / "server_secret").stat().st_mode & 0o777 == 0o600


def test_production_requires_a_secret(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, production=True)
    with pytest.raises(ConfigError):
        settings.check()
    with pytest.raises(ConfigError):
        settings.load_server_secret()
    assert not (tmp_path / "server_secret").exists()


def test_short_configured_secret_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        Settings(data_dir=tmp_path, server_secret="short").load_server_secret()


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.org"])
def test_single_tenant_mode_refused_off_loopback(host: str) -> None:
    with pytest.raises(ConfigError):
        Settings(host=host, single_tenant=True).check()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_single_tenant_mode_allowed_on_loopback(host: str) -> None:
    Settings(host=host, single_tenant=True).check()


def test_database_urls(tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path).resolved_database_url == (
        f"sqlite+aiosqlite:///{tmp_path / 'agentic.db'}"
    )
    pg = Settings(database_url="postgresql://u@h/db").resolved_database_url
    assert pg == "postgresql+asyncpg://u@h/db"
    assert Settings(database_url="postgresql://u@h/db").should_auto_migrate is False
    assert Settings(data_dir=tmp_path).should_auto_migrate is True


def test_upstream_url_suffix_is_normalized() -> None:
    assert Settings(upstream_base_url="http://x:8000/v1/").upstream_base_url == "http://x:8000"


def test_keep_warm_needs_the_replicas_kv_events(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="AGENTIC_KV_EVENTS_ENDPOINTS"):
        Settings(keep_warm_enabled=True).check()
    Settings(keep_warm_enabled=True, kv_events_endpoints={"r1": "ipc:///tmp/r1"}).check()
    # The replicas' metrics pages, from one environment variable as the endpoints are.
    monkeypatch.setenv(
        "AGENTIC_KEEP_WARM_REPLICA_METRICS", "r1=http://a:1/metrics, r2=http://b:2/metrics"
    )
    assert Settings().keep_warm_replica_metrics == {
        "r1": "http://a:1/metrics",
        "r2": "http://b:2/metrics",
    }


def test_a_short_metrics_token_is_refused() -> None:
    with pytest.raises(ConfigError, match="AGENTIC_METRICS_TOKEN"):
        Settings(metrics_token="short").check()
    Settings(metrics_token="a-long-enough-scrape-token").check()


def test_trusted_proxies_are_addresses_networks_or_any(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().forwarded_allow_ips == ["127.0.0.1"]
    monkeypatch.setenv("AGENTIC_FORWARDED_ALLOW_IPS", "10.0.0.0/8, 192.168.1.7,::1")
    assert Settings().forwarded_allow_ips == ["10.0.0.0/8", "192.168.1.7", "::1"]
    monkeypatch.setenv("AGENTIC_FORWARDED_ALLOW_IPS", "*")
    assert Settings().forwarded_allow_ips == ["*"]
    monkeypatch.setenv("AGENTIC_FORWARDED_ALLOW_IPS", "proxy.internal")
    with pytest.raises(ValidationError, match=r"proxy\.internal"):
        Settings()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("AGENTIC_HISTORY_CACHE_MB", "AGENTIC_HISTORY_MEMO_MB"),
        ("AGENTIC_TOKEN_ARTIFACT_CACHE_MB", "AGENTIC_TOKEN_ARTIFACT_MEMO_MB"),
        ("AGENTIC_MODELS_CACHE_SECONDS", "AGENTIC_MODELS_MEMO_SECONDS"),
    ],
)
def test_a_renamed_setting_is_a_startup_error_naming_the_new_one(
    monkeypatch: pytest.MonkeyPatch, old: str, new: str
) -> None:
    monkeypatch.setenv(old, "0")
    with pytest.raises(ConfigError, match=f"{old} was renamed {new}"):
        Settings().check()


def test_the_memo_settings_are_read_under_their_new_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTIC_HISTORY_MEMO_MB", "0")
    monkeypatch.setenv("AGENTIC_TOKEN_ARTIFACT_MEMO_MB", "1.5")
    monkeypatch.setenv("AGENTIC_MODELS_MEMO_SECONDS", "3")
    settings = Settings()
    settings.check()
    assert (settings.history_memo_mb, settings.token_artifact_memo_mb) == (0, 1.5)
    assert settings.models_memo_seconds == 3
