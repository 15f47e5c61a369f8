"""The scale-out tier, started and stopped as one: three gateway replicas sharing only a
PostgreSQL of the tier's own, behind HAProxy, in front of two model replicas behind
vllm-router.

    clients -> HAProxy -> gateway g1 | g2 | g3 (agentic-api serve, one data dir each)
                            |  each through its own port of the counting tap
                            v
                          vllm-router (consistent_hash) -> replica r1 | r2
                                                            (vLLM, or the simulator)
    each replica's KV events -> a relay (XSUB/XPUB) -> every gateway subscribes

``upstream="vllm"`` runs real CPU vLLMs with the tiny model (the real_vllm tier's cache);
``"sim"`` runs the simulator with a block-capacity cache and the same KV events, which
starts in a second and is what the tier is debugged against.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tests.scale_out.haproxy import HAProxy
from tests.scale_out.postgres import OwnPostgres
from tests.scale_out.processes import Child
from tests.support import strict_wiring
from tests.support.processes import process_env
from tests.support.servers import free_port
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant

REPO = Path(__file__).resolve().parents[2]
CACHE = Path.home() / ".cache" / "agentic-api"
MODEL = "tiny-llama"
BLOCK_SIZE = 32
GATEWAYS = ("g1", "g2", "g3")
REPLICAS = ("r1", "r2")
Upstream = Literal["sim", "vllm"]


@dataclass(frozen=True)
class TierOptions:
    upstream: Upstream = "sim"
    affinity: bool = False
    # A killed gateway's claims (running jobs, in-progress Idempotency-Keys) block for
    # this long before the survivors take them over.
    lease_seconds: float = 10.0
    # vLLM: the KV cache of each replica (2,560 tokens of the tiny model: sessions
    # compete, so evictions happen); the simulator: its capacity in blocks.
    kv_bytes: int = 2_621_440
    sim_blocks: int = 80


@dataclass
class Gateway:
    name: str
    port: int
    child: Child

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Tier:
    options: TierOptions
    folder: Path
    postgres: OwnPostgres
    db_url: str
    gateways: dict[str, Gateway]
    haproxy: HAProxy
    tenant: TenantKeys
    admin_key: str
    tap_log: Path
    replicas: dict[str, Child] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.haproxy.url

    def kill_gateway(self, name: str) -> None:
        self.gateways[name].child.kill()

    def restart_gateway(self, name: str, timeout: float = 120) -> None:
        gateway = self.gateways[name]
        gateway.child.restart()
        gateway.child.wait_http(f"{gateway.url}/health", timeout)


def _model_replica(
    name: str, port: int, events_port: int, options: TierOptions, folder: Path
) -> Child:
    events = f"tcp://127.0.0.1:{events_port}"
    if options.upstream == "sim":
        command = [
            sys.executable, "-m", "tests.upstream_sim", "--port", str(port), "--model", MODEL,
            "--block-size", str(BLOCK_SIZE), "--max-model-len", "2048", "--replica", name,
            "--cache-capacity-blocks", str(options.sim_blocks),
            "--prefill-seconds-per-token", "0.0002", "--decode-seconds-per-token", "0.004",
            "--kv-events-endpoint", events, "--kv-events-topic", name,
        ]  # fmt: skip
        return Child(name, command, folder)
    venv = Path(os.environ.get("AGENTIC_VLLM_VENV", CACHE / "vllm-venv"))
    model_dir = os.environ.get("AGENTIC_VLLM_MODEL_DIR", str(CACHE / MODEL))
    kv_config = (
        '{"enable_kv_cache_events":true,"publisher":"zmq",'
        f'"endpoint":"{events}","topic":"{name}"}}'
    )
    command = [
        str(venv / "bin" / "python"), str(REPO / "scripts/real_vllm/launcher.py"), "serve",
        model_dir, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL,
        "--enable-prefix-caching", "--enable-prompt-tokens-details", "--max-model-len", "2048",
        "--dtype", "float32", "--enforce-eager", "--block-size", str(BLOCK_SIZE),
        "--kv-cache-memory-bytes", str(options.kv_bytes), "--kv-events-config", kv_config,
    ]  # fmt: skip
    # VLLM_CPU_KVCACHE_SPACE would override --kv-cache-memory-bytes.
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    return Child(name, command, folder, env)


def _migrate(db_url: str, folder: Path) -> None:
    """As a migration Job would: ``agentic-api migrate`` once, before any gateway starts."""
    env = process_env(db_url, "http://127.0.0.1:9", folder)
    subprocess.run(
        [sys.executable, "-m", "agentic_api.cli", "migrate"],
        env=env,
        check=True,
        capture_output=True,
    )


@contextmanager
def running_tier(options: TierOptions, folder: Path) -> Iterator[Tier]:
    folder.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        postgres = OwnPostgres()
        stack.callback(postgres.remove)
        postgres.start()
        db_url = postgres.create_database("agentic")
        _migrate(db_url, folder)

        children: list[Child] = []

        def started(child: Child) -> Child:
            children.append(child)
            return child

        def stop_children() -> None:
            for child in reversed(children):
                child.stop()

        stack.callback(stop_children)
        relay_out: dict[str, int] = {}
        replica_ports: dict[str, int] = {}
        replicas: dict[str, Child] = {}
        for name in REPLICAS:
            relay_in, relay_out[name] = free_port(), free_port()
            started(
                Child(
                    f"kv-relay-{name}",
                    [sys.executable, str(REPO / "scripts/bench/agents_kv_relay.py"),
                     "--publishers", str(relay_in), "--subscribers", str(relay_out[name])],
                    folder,
                )
            )  # fmt: skip
            replica_ports[name] = free_port()
            replicas[name] = started(
                _model_replica(name, replica_ports[name], relay_in, options, folder)
            )
        for name, child in replicas.items():
            child.wait_http(f"http://127.0.0.1:{replica_ports[name]}/health", 600)

        router_port = free_port()
        router_bin = os.environ.get(
            "AGENTIC_ROUTER_BIN", str(CACHE / "router-venv/bin/vllm-router")
        )
        router = started(
            Child(
                "router",
                [router_bin, "--host", "127.0.0.1", "--port", str(router_port),
                 "--worker-urls", *(f"http://127.0.0.1:{p}" for p in replica_ports.values()),
                 "--policy", "consistent_hash", "--prometheus-host", "127.0.0.1",
                 "--prometheus-port", str(free_port()),
                 "--health-check-interval-secs", "2", "--health-failure-threshold", "1"],
                folder,
            )
        )  # fmt: skip
        router.wait_http(f"http://127.0.0.1:{router_port}/health", 60)

        tap_ports = {name: free_port() for name in GATEWAYS}
        tap_log = folder / "taps.jsonl"
        tap = started(
            Child(
                "taps",
                [sys.executable, "-m", "tests.scale_out.upstream_tap",
                 "--upstream", f"http://127.0.0.1:{router_port}", "--log", str(tap_log),
                 *(f"--listen={name}={port}" for name, port in tap_ports.items())],
                folder,
            )
        )  # fmt: skip
        tap.wait_http(f"http://127.0.0.1:{tap_ports['g1']}/health", 60)

        kv_endpoints = ",".join(
            f"{name}=connect:tcp://127.0.0.1:{port}" for name, port in relay_out.items()
        )
        gateways: dict[str, Gateway] = {}
        for name in GATEWAYS:
            port = free_port()
            data_dir = folder / f"data-{name}"
            env = process_env(
                db_url,
                f"http://127.0.0.1:{tap_ports[name]}",
                data_dir,
                http_workers=1,
                lease_seconds=options.lease_seconds,
                kv_events_endpoints=kv_endpoints,
                upstream_read_timeout=120,
                log_format="json",
            )
            data_dir.mkdir(parents=True, exist_ok=True)
            (data_dir / "tmp").mkdir(exist_ok=True)
            command = [sys.executable, "-m", "agentic_api.cli", "serve", "--port", str(port)]
            gateways[name] = Gateway(name, port, started(Child(name, command, folder, env)))
        for gateway in gateways.values():
            gateway.child.wait_http(f"{gateway.url}/ready", 180)
            # Replies read from a gateway directly pass the suite's strict wire checks (the
            # balancer's own answers, a 503 with no server left, are HAProxy's).
            strict_wiring.watch(gateway.url)
            stack.callback(strict_wiring.unwatch, gateway.url)

        haproxy = HAProxy(
            folder, free_port(), {n: g.port for n, g in gateways.items()}, affinity=options.affinity
        )
        stack.callback(haproxy.stop)
        tenant = create_tenant(postgres.url("agentic"), "scale-out")
        admin_key = create_admin_key(postgres.url("agentic"))
        yield Tier(
            options, folder, postgres, db_url, gateways, haproxy, tenant, admin_key, tap_log,
            replicas,
        )  # fmt: skip
