"""Every metric in agentic_api.metrics, in both of prometheus-client's modes: one process
(the default registry, with process metrics) and several `serve` workers writing to one
directory (merged by ``exposition()``: counters and histograms summed, each gauge combined
as its meaning needs, dead workers' gauges dropped). Each "worker" is a real process of its
own (tests/support/metrics_probe.py), since the mode is chosen when the library is imported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from agentic_api import metrics
from tests.support.metrics_probe import LABEL, every_metric

ROOT = Path(__file__).resolve().parents[2]

# How each gauge combines over workers: the choice made (and explained) in metrics.py. A
# new gauge fails this test until it is added here with a thought about its mode.
GAUGE_MODES = {
    "agentic_streams_in_flight": "livesum",
    "agentic_background_tasks": "livesum",
    "agentic_background_queue_depth": "livemostrecent",
    "agentic_kv_resident_tokens": "livemax",
    "agentic_kv_tracked_sessions": "livemax",
    "agentic_kv_subscriber_connected": "livemin",
}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Probe:
    """One process that fed every metric (counters +scale, histograms scale, gauges set)."""

    def __init__(self, env: dict[str, str], scale: float, gauge: float) -> None:
        self.scale, self.gauge = scale, gauge
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "tests.support.metrics_probe", str(scale), str(gauge)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self._line()
        assert line.startswith("fed "), line
        self.pid = int(line.split()[1])

    def _line(self) -> str:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        assert line, f"the probe exited ({self.popen.wait(timeout=10)})"
        return line

    def ask(self, command: str) -> str:
        assert self.popen.stdin is not None
        self.popen.stdin.write(command + "\n")
        self.popen.stdin.flush()
        return self._line()

    def scrape(self) -> str:
        return str(json.loads(self.ask("scrape")))

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def close(self) -> None:
        if self.popen.poll() is None:
            assert self.popen.stdin is not None
            self.popen.stdin.close()
            self.popen.wait(timeout=10)
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def probes() -> Iterator[list[Probe]]:
    started: list[Probe] = []
    yield started
    for probe in started:
        probe.close()


def _env(directory: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    if directory is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    return env


def _samples(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _labels(metric: object) -> frozenset[tuple[str, str]]:
    return frozenset((name, LABEL) for name in getattr(metric, "_labelnames", ()))


def _check_totals(samples: Samples, total: float, observations: int) -> None:
    """Counters and histograms: the sum over every process that fed them."""
    for metric in every_metric():
        name, labels = metric._name, _labels(metric)
        if isinstance(metric, Counter):
            assert samples.get((f"{name}_total", labels)) == total, name
        elif isinstance(metric, Histogram):
            assert samples.get((f"{name}_count", labels)) == observations, name
            assert samples.get((f"{name}_sum", labels)) == total, name
            bucket = labels | {("le", "+Inf")}
            assert samples.get((f"{name}_bucket", bucket)) == observations, name


def _gauges(samples: Samples) -> dict[str, float | None]:
    return {
        metric._name: samples.get((metric._name, _labels(metric)))
        for metric in every_metric()
        if isinstance(metric, Gauge)
    }


def test_every_gauge_has_its_mode_decided() -> None:
    gauges = {m._name: m for m in every_metric() if isinstance(m, Gauge)}
    assert set(gauges) == set(GAUGE_MODES)
    kinds = {type(m) for m in every_metric()}
    assert kinds <= {Counter, Gauge, Histogram}, "a new kind of metric: test how it merges"


def test_one_process_exposes_every_metric_with_process_metrics(probes: list[Probe]) -> None:
    probe = Probe(_env(None), scale=2, gauge=5)
    probes.append(probe)
    samples = _samples(probe.scrape())
    _check_totals(samples, total=2, observations=1)
    assert set(_gauges(samples).values()) == {5}
    assert any(name == "process_cpu_seconds_total" for name, _ in samples)
    # Marking dead changes nothing without a shared directory.
    assert probe.ask("dead") == "marked\n"
    assert set(_gauges(_samples(probe.scrape())).values()) == {5}


def test_several_workers_merge_as_each_metric_means(
    probes: list[Probe], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    env = _env(directory)
    # Started one after the other, so the gauges' "most recent" is the last one's (5).
    first, second, third = (Probe(env, 1, 3), Probe(env, 2, 7), Probe(env, 4, 5))
    probes.extend([first, second, third])
    # This (test) process scrapes as a worker would: the files, not its own registry.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))

    samples = _samples(metrics.exposition().decode())
    _check_totals(samples, total=7, observations=3)
    expected = {"livesum": 15, "livemax": 7, "livemin": 3, "livemostrecent": 5}
    assert _gauges(samples) == {name: expected[mode] for name, mode in GAUGE_MODES.items()}
    assert not any(name.startswith("process_") for name, _ in samples)
    # Whichever worker answers the scrape, the answer is the server's.
    assert _samples(first.scrape()) == samples == _samples(third.scrape())

    # A worker that crashed never marked itself dead: the next scrape forgets its gauges,
    # its counts stay.
    third.kill()
    samples = _samples(metrics.exposition().decode())
    _check_totals(samples, total=7, observations=3)
    expected = {"livesum": 10, "livemax": 7, "livemin": 3, "livemostrecent": 7}
    assert _gauges(samples) == {name: expected[mode] for name, mode in GAUGE_MODES.items()}

    # A worker shutting down marks itself dead: only the first one's gauges remain.
    assert second.ask("dead") == "marked\n"
    samples = _samples(second.scrape())
    _check_totals(samples, total=7, observations=3)
    assert _gauges(samples) == dict.fromkeys(GAUGE_MODES, 3)
