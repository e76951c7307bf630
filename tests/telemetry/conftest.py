"""The process's one global OpenTelemetry tracer provider, recording into memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_GLOBAL = InMemorySpanExporter()


@pytest.fixture
def global_spans() -> Iterator[InMemorySpanExporter]:
    """Spans of the global provider (OpenTelemetry lets it be set once per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_GLOBAL))
        trace.set_tracer_provider(provider)
    _GLOBAL.clear()
    yield _GLOBAL
    _GLOBAL.clear()
