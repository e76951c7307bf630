"""The per-request metrics as plain numbers, turned into Prometheus families at scrape time.

Every API request counts once and observes its duration: the one hot path of the
metrics. prometheus_client's ``Counter.inc`` and ``Histogram.observe`` check their state
and take a lock per value on every call (a counter, a histogram's sum and its bucket:
three locks a request, about 1.5 µs). This keeps plain integers under one lock and
builds the same ``shipping_async_requests_total`` and
``shipping_async_request_duration_seconds`` families when ``/metrics`` is scraped: the
custom-collector interface prometheus_client documents for exactly this.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterator, Sequence
from itertools import accumulate

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

__all__ = ["RequestStats"]


class _Entry:
    """One (account, operation, status class): its durations per bucket and their sum."""

    __slots__ = ("buckets", "total")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size  # per bucket, not cumulative; the last one is +Inf
        self.total = 0.0


class RequestStats:
    """Requests by account, operation and status class, and their durations."""

    def __init__(self, prefix: str, buckets: Sequence[float]) -> None:
        self._prefix = prefix
        self._bounds = (*sorted(buckets), math.inf)
        self._les: list[str] = [
            floatToGoString(bound)  # type: ignore[no-untyped-call]
            for bound in self._bounds
        ]
        # The count of a key is the sum of its buckets: one dictionary look-up a request.
        self._entries: dict[tuple[str, str, str], _Entry] = {}
        # Hooks may run in several threads (an event loop each); the scrape runs in the
        # HTTP server's thread.
        self._lock = threading.Lock()

    def record(self, key: tuple[str, str, str], seconds: float) -> None:
        """Count one request of (account, operation, status class) and its duration."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(len(self._bounds))
            entry.buckets[bisect.bisect_left(self._bounds, seconds)] += 1
            entry.total += seconds

    def collect(self) -> Iterator[Metric]:
        """The two families, as prometheus_client's registry asks for them."""
        with self._lock:
            entries = [(key, list(e.buckets), e.total) for key, e in self._entries.items()]
        durations: dict[tuple[str, str], tuple[list[int], float]] = {}
        for (account, operation, _), buckets, total in entries:
            summed, seconds = durations.get((account, operation), ([0] * len(buckets), 0.0))
            durations[account, operation] = (
                [a + b for a, b in zip(summed, buckets, strict=True)],
                seconds + total,
            )
        requests = CounterMetricFamily(
            f"{self._prefix}_requests",
            "API requests sent (each attempt), by operation and status class "
            "(2xx, 4xx, 5xx; 'error': no answer)",
            labels=["account", "operation", "status_class"],
        )
        for labels, buckets, _ in entries:
            requests.add_metric(labels, sum(buckets))
        yield requests
        histogram = HistogramMetricFamily(
            f"{self._prefix}_request_duration_seconds",
            "Time from sending an API request to its answer (or its failure)",
            labels=["account", "operation"],
        )
        for (account, operation), (buckets, total) in durations.items():
            cumulative = zip(self._les, accumulate(buckets), strict=True)
            histogram.add_metric([account, operation], list(cumulative), total)
        yield histogram
