"""OpenTelemetry spans, collected with the SDK's in-memory exporter: per call and per job stage."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aioresponses import aioresponses
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from resources.support import BASE_URL, TOKEN, MockAPI, make_client, order, order_request

from shipping_async.errors import OrderOutcomeUnknownError
from shipping_async.telemetry._scope import JobScope, current_job, job_stage
from shipping_async.telemetry.traces import ClientTracing

ORDER_7001 = BASE_URL + "/orders/7001"


@pytest.fixture
def mock() -> Any:
    with MockAPI() as mocked:
        yield mocked


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.clear()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> ClientTracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return ClientTracing(account="acme", tracer_provider=provider)


def everything_in(span: ReadableSpan) -> str:
    return repr((span.name, dict(span.attributes or {}), span.status, span.events))


async def test_one_client_span_per_call_with_route_status_and_retries(
    mock: aioresponses, tracing: ClientTracing, exporter: InMemorySpanExporter
) -> None:
    mock.get(ORDER_7001, status=503, body=b"")
    mock.get(ORDER_7001, payload={"order": order()})
    mock.post(BASE_URL + "/orders", status=201, payload={"order": order()})

    async with make_client(hooks=[tracing]) as client:
        await client.orders.get(7001)
        await client.orders.create(order_request())

    got, created = exporter.get_finished_spans()
    assert got.name == "GET /orders/{id}"
    assert got.kind is SpanKind.CLIENT
    assert got.attributes == {
        "http.request.method": "GET",
        "url.template": "/orders/{id}",
        "shipping_async.operation": "get_order",
        "shipping_async.account": "acme",
        "http.response.status_code": 200,
        "shipping_async.retries": 1,
    }
    assert created.name == "POST /orders"
    assert created.attributes is not None
    assert created.attributes["http.response.status_code"] == 201
    assert created.attributes["shipping_async.retries"] == 0


async def test_a_failed_call_names_its_error_but_not_the_token_address_or_host(
    mock: aioresponses, tracing: ClientTracing, exporter: InMemorySpanExporter
) -> None:
    mock.post(BASE_URL + "/orders", exception=aiohttp.ServerDisconnectedError())

    async with make_client(hooks=[tracing]) as client:
        with pytest.raises(OrderOutcomeUnknownError):
            await client.orders.create(order_request())

    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == "OrderOutcomeUnknownError"
    text = everything_in(span)
    for secret in (TOKEN, "api.shipping.test", "Main Street", "Ada Lovelace", "PO-2026-0001"):
        assert secret not in text


async def test_job_stage_spans_hold_the_job_key_and_parent_the_call_spans(
    mock: aioresponses, global_spans: InMemorySpanExporter
) -> None:
    mock.get(ORDER_7001, payload={"order": order()})

    async with make_client(hooks=[ClientTracing()]) as client:
        with job_stage("waybill", "A-17", "acme"):
            await client.orders.get(7001)

    call, stage = global_spans.get_finished_spans()
    assert stage.name == "shipping_async.job.waybill"
    assert stage.attributes == {
        "shipping_async.job.key": "A-17",
        "shipping_async.job.stage": "waybill",
        "shipping_async.account": "acme",
    }
    assert call.parent is not None
    assert stage.context is not None
    assert call.parent.span_id == stage.context.span_id
    assert TOKEN not in everything_in(call) + everything_in(stage)


def test_a_stage_that_fails_ends_its_span_as_an_error_and_leaves_the_job(
    global_spans: InMemorySpanExporter,
) -> None:
    def quote() -> None:
        with job_stage("quote", "A-18", "acme"):
            assert current_job() == JobScope("A-18", "acme", "quote")
            raise ValueError("no estimate")

    with pytest.raises(ValueError, match="no estimate"):
        quote()
    assert current_job() is None
    (stage,) = global_spans.get_finished_spans()
    assert stage.name == "shipping_async.job.quote"
    assert stage.status.status_code is StatusCode.ERROR
    assert [event.name for event in stage.events] == ["exception"]


@pytest.mark.parametrize(
    ("setup", "check"),
    [
        pytest.param(
            "sys.modules['opentelemetry'] = None",
            "assert current_job() == JobScope('A-1', 'acme', 'order')",
            id="otel-absent",
        ),
        pytest.param(
            "from opentelemetry import trace",
            "assert not trace.get_current_span().is_recording()",
            id="otel-unconfigured",
        ),
    ],
)
def test_stages_work_unchanged_without_opentelemetry_or_its_configuration(
    setup: str, check: str
) -> None:
    script = "\n".join(
        [
            "import sys",
            setup,
            "import shipping_async",
            "from shipping_async.telemetry._scope import JobScope, current_job, job_stage",
            "with job_stage('order', 'A-1', 'acme'):",
            f"    {check}",
            "assert current_job() is None",
            "print('ok')",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


@pytest.mark.parametrize(
    ("environment", "check"),
    [
        pytest.param(
            {},
            "assert 'opentelemetry' not in sys.modules",
            id="not-loaded-not-imported",
        ),
        pytest.param(
            {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"},
            "from opentelemetry import trace\n"
            "with job_stage('quote', 'A-2', 'acme'):\n"
            "    assert trace.get_current_span().is_recording()",
            id="named-by-the-environment",
        ),
    ],
)
def test_stages_import_opentelemetry_only_where_a_provider_can_be_installed(
    environment: dict[str, str], check: str
) -> None:
    """Nobody loaded OpenTelemetry's API and the environment names no provider: no span
    could record, and the API is not imported (start-up cost). A provider named by the
    environment is loaded and records."""
    script = "\n".join(
        [
            "import sys",
            "from shipping_async.telemetry._scope import job_stage",
            "with job_stage('order', 'A-1', 'acme'):",
            "    pass",
            check,
            "print('ok')",
        ]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**env, **environment},
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


async def test_a_bulk_run_has_a_span_per_stage_of_every_job(
    global_spans: InMemorySpanExporter,
) -> None:
    from bulk.support import make_jobs

    from shipping_async import AsyncShippingClient, BulkShipper, RollingWindowLimiter
    from shipping_async.sandbox import SandboxServer

    async with (
        SandboxServer(speed=100.0, seed=1) as sandbox,
        AsyncShippingClient(
            sandbox.token,
            base_url=sandbox.base_url,
            clock=sandbox.clock,
            order_limiter=RollingWindowLimiter(clock=sandbox.clock),
            hooks=[ClientTracing()],
        ) as client,
    ):
        results = [result async for result in BulkShipper(client).run(make_jobs(3))]
    assert len(results) == 3

    spans = global_spans.get_finished_spans()
    stages = [s for s in spans if s.name.startswith("shipping_async.job.")]
    for job in results:
        mine = {
            s.name.removeprefix("shipping_async.job.")
            for s in stages
            if s.attributes and s.attributes["shipping_async.job.key"] == job.key
        }
        assert mine == {"quote", "order", "waybill", "pickup"}
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    for call in (s for s in spans if s.kind is SpanKind.CLIENT):
        assert call.parent is not None
        assert by_id[call.parent.span_id].name.startswith("shipping_async.job.")
    assert sandbox.token not in "".join(everything_in(s) for s in spans)
