"""The process's one global OpenTelemetry tracer provider, recording into memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_GLOBAL = InMemorySpanExporter()
_RECORDING = [False]


class _WhileRecording(SimpleSpanProcessor):
    """Exports only while a test holds ``global_spans``: the provider stays set for the
    rest of the session (OpenTelemetry allows no unset), the tests after it pay nothing."""

    def on_end(self, span: ReadableSpan) -> None:
        if _RECORDING[0]:
            super().on_end(span)


@pytest.fixture
def global_spans() -> Iterator[InMemorySpanExporter]:
    """Spans of the global provider (OpenTelemetry lets it be set once per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(_WhileRecording(_GLOBAL))
        trace.set_tracer_provider(provider)
    _GLOBAL.clear()
    _RECORDING[0] = True
    yield _GLOBAL
    _RECORDING[0] = False
    _GLOBAL.clear()
