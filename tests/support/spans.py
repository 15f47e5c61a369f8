"""The spans a test's turns made, from OpenTelemetry's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentic_api import tracing


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """Tracing installed for the block, every finished span kept in memory."""
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        tracing.uninstall()
