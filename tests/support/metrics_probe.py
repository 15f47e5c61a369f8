"""A stand-in for one server process, for the metrics tests: ``python -m
tests.support.metrics_probe SCALE GAUGE_VALUE`` imports agentic_api.metrics fresh (so
prometheus-client picks its mode from this process's environment, as a `serve` worker
does), feeds every metric once, says ``fed PID``, then answers commands on stdin:
``scrape`` (one line: the exposition as JSON text), ``dead`` (marks itself dead, as a
worker does at shutdown). It exits at the end of its input.

Feeding: every label is ``probe``; counters go up by SCALE, histograms observe SCALE,
gauges are set to GAUGE_VALUE.
"""

from __future__ import annotations

import json
import os
import sys

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from agentic_api import metrics

LABEL = "probe"


def every_metric() -> list[MetricWrapperBase]:
    """Every series agentic_api.metrics defines."""
    return [value for value in vars(metrics).values() if isinstance(value, MetricWrapperBase)]


def feed(metric: MetricWrapperBase, scale: float, gauge: float) -> None:
    target = metric.labels(*[LABEL] * len(metric._labelnames)) if metric._labelnames else metric
    if isinstance(target, Counter):
        target.inc(scale)
    elif isinstance(target, Histogram):
        target.observe(scale)
    elif isinstance(target, Gauge):
        target.set(gauge)
    else:
        raise AssertionError(f"no way to feed {metric!r}")


def main() -> None:
    scale, gauge = float(sys.argv[1]), float(sys.argv[2])
    for metric in every_metric():
        feed(metric, scale, gauge)
    print(f"fed {os.getpid()}", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "scrape":
            print(json.dumps(metrics.exposition().decode()), flush=True)
        elif command == "dead":
            metrics.mark_this_process_dead()
            print("marked", flush=True)
        else:
            raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
