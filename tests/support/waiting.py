"""Waiting on what runs on its own (KV events, probe loops, a process starting), and
reading this process's Prometheus samples."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from prometheus_client import REGISTRY


def eventually(check: Callable[[], bool], what: str, seconds: float = 15) -> None:
    """Polls ``check`` until it holds; fails naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)


def metric(name: str, **labels: str) -> float:
    """A sample of this process's default registry (0 when it has none yet)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def wait_healthy(url: str, seconds: float = 30) -> None:
    """Until ``url``/health answers 200 (a server starting in another process)."""

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    eventually(healthy, f"{url} healthy", seconds)
