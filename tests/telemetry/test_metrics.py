"""Prometheus metrics from the client hooks, scraped over HTTP from prometheus_client's server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aioresponses import aioresponses
from resources.support import (
    BASE_URL,
    MockAPI,
    direct_quote,
    make_client,
    order,
    order_request,
    quote_request,
    reply,
)

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.clock import ManualClock
from shipping_async.errors import OrderOutcomeUnknownError
from shipping_async.limiter import RollingWindowLimiter
from shipping_async.telemetry._scope import job_stage
from shipping_async.telemetry.metrics import Metrics, MetricsServer

from .scrape import scrape, total, value

ORDER_7001 = BASE_URL + "/orders/7001"
RATE_TEXT = {"success": False, "error": "20 of 20 in 60 seconds", "errors": []}


@pytest.fixture
def mock() -> Any:
    with MockAPI(passthrough=["http://127.0.0.1"]) as mocked:
        yield mocked


@pytest.fixture
def metrics() -> Iterator[tuple[Metrics, MetricsServer]]:
    metrics = Metrics()
    server = metrics.serve(port=0)
    yield metrics, server
    server.close()


async def test_port_zero_serves_on_a_free_loopback_port(
    metrics: tuple[Metrics, MetricsServer],
) -> None:
    _, server = metrics
    assert server.host == "127.0.0.1"
    assert server.port > 0
    samples = await scrape(server.port)
    assert value(samples, "shipping_async_orders_created_total", account="acme") == 0


async def test_requests_retries_429s_and_orders_are_counted_per_account_and_operation(
    mock: aioresponses, metrics: tuple[Metrics, MetricsServer]
) -> None:
    prometheus, server = metrics
    clock = ManualClock(auto_advance=True)
    limiter = RollingWindowLimiter(20, 60.0, clock=clock)
    answers = iter([reply(429, RATE_TEXT), reply(429, RATE_TEXT)])

    def orders(url: Any, **kwargs: Any) -> Any:
        return next(answers, reply(201, {"order": order()}))

    mock.post(BASE_URL + "/orders", callback=orders, repeat=True)
    mock.get(ORDER_7001, status=503, body=b"")
    mock.get(ORDER_7001, payload={"order": order()})
    hooks = [prometheus.client_hooks("acme")]
    async with make_client(clock=clock, order_limiter=limiter, hooks=hooks) as client:
        for _ in range(3):
            await client.orders.create(order_request())
        await client.orders.get(7001)

    samples = await scrape(server.port)
    requests = "shipping_async_requests_total"
    acme = {"account": "acme"}
    assert value(samples, requests, **acme, operation="create_order", status_class="4xx") == 2
    assert value(samples, requests, **acme, operation="create_order", status_class="2xx") == 3
    assert value(samples, requests, **acme, operation="get_order", status_class="5xx") == 1
    assert value(samples, requests, **acme, operation="get_order", status_class="2xx") == 1
    assert value(samples, "shipping_async_orders_created_total", **acme) == 3
    assert (
        value(samples, "shipping_async_rate_limited_total", **acme, operation="create_order") == 2
    )
    assert value(samples, "shipping_async_rate_limit_window_seconds", **acme) == 60
    assert value(samples, "shipping_async_rate_limit_orders", **acme) == 20
    assert value(samples, "shipping_async_order_pause_seconds_total", **acme) > 0
    retries = "shipping_async_retries_total"
    assert value(samples, retries, **acme, operation="create_order", reason="rate_limited") == 2
    assert value(samples, retries, **acme, operation="get_order", reason="server_error") == 1
    durations = "shipping_async_request_duration_seconds_count"
    assert total(samples, durations, **acme) == 7
    assert value(samples, "shipping_async_order_permit_wait_seconds_count", **acme) == 5
    assert value(samples, "shipping_async_order_permits_in_use", **acme) == 0
    assert value(samples, "shipping_async_order_permits_waiting", **acme) == 0


async def test_an_unknown_outcome_and_a_transport_error_are_counted(
    mock: aioresponses, metrics: tuple[Metrics, MetricsServer]
) -> None:
    prometheus, server = metrics
    mock.post(BASE_URL + "/orders", exception=aiohttp.ServerDisconnectedError())

    async with make_client(hooks=[prometheus.client_hooks()]) as client:
        with pytest.raises(OrderOutcomeUnknownError):
            await client.orders.create(order_request())

    samples = await scrape(server.port)
    labels = {"account": "", "operation": "create_order"}
    assert value(samples, "shipping_async_outcome_unknown_total", **labels) == 1
    assert value(samples, "shipping_async_requests_total", **labels, status_class="error") == 1
    assert value(samples, "shipping_async_orders_created_total", account="") == 0


async def test_job_gauges_follow_the_journal(
    metrics: tuple[Metrics, MetricsServer], tmp_path: Any
) -> None:
    from bulk.support import make_job as job

    prometheus, server = metrics
    journal = await SQLiteJournal.open(tmp_path / "j.sqlite")
    try:
        await journal.add([job("a-1"), job("a-2")])
        async with prometheus.watch_journal(journal, every=3600):
            samples = await scrape(server.port)
            assert value(samples, "shipping_async_jobs", account="*", state="pending") == 2
            (record,) = await journal.claim("w", lease=30, limit=1)
            token = record.claim_token
            assert token is not None
            await journal.record(token, record.key, JobState.QUOTED, quote_id=1, estimate_id=2)
            await journal.begin_order(token, record.key, quote_id=1, estimate_id=2)
            await journal.finish(token, record.key, JobState.UNKNOWN, error="no answer")
        samples = await scrape(server.port)
    finally:
        await journal.close()
    assert value(samples, "shipping_async_jobs", account="*", state="pending") == 1
    assert value(samples, "shipping_async_jobs", account="*", state="unknown") == 1
    assert value(samples, "shipping_async_unknown_jobs", account="*") == 1


async def test_without_an_account_the_job_stage_names_it_and_a_requote_is_counted(
    mock: aioresponses, metrics: tuple[Metrics, MetricsServer]
) -> None:
    prometheus, server = metrics
    mock.post(BASE_URL + "/quotes", status=201, payload=direct_quote(), repeat=True)

    async with make_client(hooks=[prometheus.client_hooks()]) as client:
        with job_stage("quote", "A-1", "acme"):
            await client.quotes.create(quote_request())
        with job_stage("requote", "A-1", "acme"):
            await client.quotes.create(quote_request())
        await client.quotes.create(quote_request())  # outside any job

    samples = await scrape(server.port)
    quotes = {"operation": "create_quote", "status_class": "2xx"}
    assert value(samples, "shipping_async_requests_total", account="acme", **quotes) == 2
    assert value(samples, "shipping_async_requests_total", account="", **quotes) == 1
    assert value(samples, "shipping_async_estimates_requoted_total", account="acme") == 1
    assert value(samples, "shipping_async_estimates_requoted_total", account="") == 0


@pytest.mark.parametrize(
    "durations",
    [
        pytest.param([0.005, 0.3, 100.0], id="edge-middle-overflow"),
        pytest.param([0.0, 0.0049, 0.01, 0.0101, 29.9, 30.0], id="around-bounds"),
    ],
)
def test_request_counts_and_durations_read_as_prometheus_client_would_write_them(
    durations: list[float],
) -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from shipping_async import APICall
    from shipping_async.telemetry.metrics import _REQUEST_BUCKETS

    metrics = Metrics()
    hooks = metrics.client_hooks("acme")
    reference = CollectorRegistry()
    counter = Counter(
        "shipping_async_requests", "-", ["account", "operation", "status_class"], registry=reference
    )
    histogram = Histogram(
        "shipping_async_request_duration_seconds",
        "-",
        ["account", "operation"],
        buckets=_REQUEST_BUCKETS,
        registry=reference,
    )
    for seconds in durations:
        hooks.on_response(
            APICall(operation="get_order", method="GET", route="/orders/{id}", status=200), seconds
        )
        counter.labels("acme", "get_order", "2xx").inc()
        histogram.labels("acme", "get_order").observe(seconds)

    def samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        text = generate_latest(registry).decode()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("shipping_async_request")
            for s in family.samples
            if not s.name.endswith("_created")
        }

    assert samples(metrics.registry) == samples(reference)
