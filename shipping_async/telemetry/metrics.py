"""Prometheus metrics of clients and runs (extra ``[metrics]``), served by prometheus_client.

>>> metrics = Metrics()
>>> client = AsyncShippingClient(hooks=[metrics.client_hooks("acme")])  # doctest: +SKIP
>>> server = metrics.serve(port=0)  # doctest: +SKIP
>>> server.port  # doctest: +SKIP

Every name starts with ``shipping_async_``; labels are bounded: ``account`` (as named in
the jobs; ``""`` is the default account, ``"*"`` all accounts of a journal that cannot
tell them apart), ``operation`` (the SDK's method names, e.g. ``create_order``),
``status_class``, ``reason`` and ``state``: never an order id, a key or a path with an id.
Durations are real seconds. The README lists every metric.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from threading import Thread
from typing import Protocol, runtime_checkable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from shipping_async._hooks import APICall, ClientHooks
from shipping_async.bulk.journal import JobState, Journal
from shipping_async.errors import RateLimitError
from shipping_async.telemetry._request_stats import RequestStats
from shipping_async.telemetry._scope import current_job

__all__ = ["Metrics", "MetricsServer"]

_log = logging.getLogger(__name__)

_PREFIX = "shipping_async"
# Seconds: API round trips (fast server to a slow gateway) and limiter waits (up to a
# window or more when many orders queue for the account's budget).
_REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Most families are per account; the label is bounded (see the module docstring).
_BY_ACCOUNT = ("account",)
_Labels = tuple[str, ...]


@runtime_checkable
class _CountsByAccount(Protocol):
    """A journal that can count jobs per account (the PostgreSQL one)."""

    async def counts_by_account(self) -> dict[str, dict[JobState, int]]: ...


@dataclass(frozen=True, slots=True)
class MetricsServer:
    """prometheus_client's HTTP server for ``/metrics``; ``port`` is the one it listens on."""

    host: str
    port: int
    _server: WSGIServer
    _thread: Thread

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Families:
    """Builds the metric families of one registry: the name prefix and registry in one place."""

    __slots__ = ("_registry",)

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def counter(self, name: str, documentation: str, labels: _Labels = _BY_ACCOUNT) -> Counter:
        return Counter(f"{_PREFIX}_{name}", documentation, labels, registry=self._registry)

    def gauge(self, name: str, documentation: str, labels: _Labels = _BY_ACCOUNT) -> Gauge:
        return Gauge(f"{_PREFIX}_{name}", documentation, labels, registry=self._registry)

    def histogram(
        self,
        name: str,
        documentation: str,
        labels: _Labels = _BY_ACCOUNT,
        *,
        buckets: tuple[float, ...],
    ) -> Histogram:
        return Histogram(
            f"{_PREFIX}_{name}", documentation, labels, buckets=buckets, registry=self._registry
        )


class Metrics:
    """The metrics of one process, in their own ``registry`` (a fresh one by default).

    Subscribe clients with :meth:`client_hooks`, keep the job gauges fresh with
    :meth:`watch_journal`, and :meth:`serve` ``/metrics``.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # The per-request pair lives outside prometheus_client's metric objects: the
        # hot path (see _request_stats).
        self._requests = RequestStats(_PREFIX, _REQUEST_BUCKETS)
        r.register(self._requests)
        families = _Families(r)
        self.retries = families.counter(
            "retries",
            "Requests re-sent by the client, by the reason of the re-send",
            ("account", "operation", "reason"),
        )
        self.rate_limited = families.counter(
            "rate_limited",
            "429 answers (the account's order budget was used up)",
            ("account", "operation"),
        )
        self.rate_limit_window = families.gauge(
            "rate_limit_window_seconds", "The order window the last 429 stated"
        )
        self.rate_limit_orders = families.gauge(
            "rate_limit_orders", "The orders per window the last 429 stated"
        )
        self.permits_in_use = families.gauge(
            "order_permits_in_use", "Order-limiter permits held by order creations of this process"
        )
        self.permits_waiting = families.gauge(
            "order_permits_waiting",
            "Order creations of this process waiting for an order-limiter permit",
        )
        self.permit_wait = families.histogram(
            "order_permit_wait_seconds",
            "Time an order creation waited for its order-limiter permit",
            buckets=_WAIT_BUCKETS,
        )
        self.pause = families.counter(
            "order_pause_seconds", "Seconds of order-limiter pause imposed after 429s"
        )
        self.outcome_unknown = families.counter(
            "outcome_unknown",
            "Requests written without a usable answer (check before re-sending)",
            ("account", "operation"),
        )
        self.orders_created = families.counter(
            "orders_created", "Orders the API confirmed as created"
        )
        self.requotes = families.counter(
            "estimates_requoted", "Jobs sent back to quoting because their estimate expired"
        )
        self.jobs = families.gauge(
            "jobs", "Jobs in the journal by state (read from the journal)", ("account", "state")
        )
        self.unknown_jobs = families.gauge(
            "unknown_jobs",
            "Jobs whose order outcome is unknown: reconcile them (shipping-async status)",
        )

    def client_hooks(self, account: str | None = None) -> ClientHooks:
        """Hooks that count a client's calls under ``account``.

        ``None``: under the account of the job whose stage makes the call
        (:func:`~shipping_async.telemetry._scope.job_stage`), ``""`` outside a job; one
        set of hooks then serves the clients of every account of a run. A quote that
        succeeds in a job's ``requote`` stage counts as an estimate re-quoted.
        """
        return _ClientMetrics(self, account)

    async def refresh_jobs(self, journal: Journal) -> None:
        """Set the job gauges from the journal's counts (per account when it can tell)."""
        if isinstance(journal, _CountsByAccount):
            per_account = await journal.counts_by_account()
        else:
            per_account = {"*": await journal.counts()}
        for account, counts in per_account.items():
            for state in JobState:
                self.jobs.labels(account, state.value).set(counts.get(state, 0))
            self.unknown_jobs.labels(account).set(counts.get(JobState.UNKNOWN, 0))

    @asynccontextmanager
    async def watch_journal(self, journal: Journal, *, every: float = 5.0) -> AsyncIterator[None]:
        """Refresh the job gauges now, every ``every`` real seconds, and once at the end.

        A failed refresh is logged and tried again next time: the gauges are a view,
        and the run must not stop for them.
        """

        async def refresh() -> None:
            try:
                await self.refresh_jobs(journal)
            except Exception as exc:
                _log.warning("job gauges not refreshed: %s: %s", type(exc).__name__, exc)

        async def loop() -> None:
            while True:
                await asyncio.sleep(every)  # infrastructure time, not protocol time
                await refresh()

        await refresh()
        task = asyncio.create_task(loop(), name="shipping_async.metrics.journal")
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            await refresh()

    def serve(self, *, port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
        """Serve ``/metrics`` with prometheus_client's HTTP server, in a daemon thread.

        ``port=0`` takes a free port: read it from the result's ``port``.
        """
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        return MetricsServer(host, int(server.server_port), server, thread)


_STATUS_CLASSES = {n: f"{n}xx" for n in range(1, 6)}


class _ClientMetrics(ClientHooks):
    """The client hooks of :class:`Metrics`; label children are cached per account."""

    def __init__(self, metrics: Metrics, account: str | None) -> None:
        self._m = metrics
        self._account = account
        self._children: dict[str, _Children] = {}

    def _of(self) -> _Children:
        account = self._account
        if account is None:
            job = current_job()
            account = job.account if job is not None else ""
        children = self._children.get(account)
        if children is None:
            children = self._children[account] = _Children(self._m, account)
        return children

    def on_response(self, call: APICall, seconds: float) -> None:
        # The hot path: one look-up for the account, one for the class, one record.
        account = self._account
        if account is None:
            job = current_job()
            account = "" if job is None else job.account
        status = call.status
        kind = "error" if status is None else _STATUS_CLASSES.get(status // 100, "error")
        self._m._requests.record((account, call.operation, kind), seconds)

    def on_call_end(self, call: APICall, error: BaseException | None) -> None:
        if error is not None:
            return
        if call.operation == "create_order":
            self._of().orders_created.inc()
        elif call.operation == "create_quote":
            job = current_job()
            if job is not None and job.stage == "requote":
                self._of().requotes.inc()

    def on_retry(self, call: APICall, reason: str) -> None:
        self._m.retries.labels(self._of().account, call.operation, reason).inc()

    def on_rate_limited(self, call: APICall, error: RateLimitError) -> None:
        account = self._of().account
        self._m.rate_limited.labels(account, call.operation).inc()
        if error.window is not None:
            self._m.rate_limit_window.labels(account).set(error.window)
        if error.limit is not None:
            self._m.rate_limit_orders.labels(account).set(error.limit)

    def on_outcome_unknown(self, call: APICall, error: BaseException) -> None:
        self._m.outcome_unknown.labels(self._of().account, call.operation).inc()

    def on_permit_waiting(self, call: APICall) -> None:
        self._of().waiting.inc()

    def on_permit_granted(self, call: APICall, waited: float | None) -> None:
        children = self._of()
        children.waiting.dec()
        if waited is not None:
            children.in_use.inc()
            children.wait.observe(waited)

    def on_permit_released(self, call: APICall) -> None:
        self._of().in_use.dec()

    def on_paused(self, call: APICall, seconds: float) -> None:
        self._of().pause.inc(seconds)


class _Children:
    """One account's label children, so a request costs dictionary look-ups, not labels()."""

    __slots__ = (
        "account",
        "in_use",
        "orders_created",
        "pause",
        "requotes",
        "wait",
        "waiting",
    )

    def __init__(self, metrics: Metrics, account: str) -> None:
        self.account = account
        self.in_use = metrics.permits_in_use.labels(account)
        self.waiting = metrics.permits_waiting.labels(account)
        self.wait = metrics.permit_wait.labels(account)
        self.pause = metrics.pause.labels(account)
        self.orders_created = metrics.orders_created.labels(account)
        self.requotes = metrics.requotes.labels(account)
