"""The bulk pipeline keeps an order whose answer had an odd field: ordered, with its id."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from shipping_async._client import AsyncShippingClient
from shipping_async.bulk.results import ResultStatus
from shipping_async.bulk.shipper import BulkShipper
from shipping_async.limiter import RollingWindowLimiter
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import make_jobs, orders_created


@asynccontextmanager
async def odd_gateway(upstream: str) -> AsyncIterator[str]:
    """A gateway in front of ``upstream`` that rewrites each created order's ``created_at``."""
    async with aiohttp.ClientSession() as session:

        async def forward(request: web.Request) -> web.Response:
            headers = {k: v for k, v in request.headers.items() if k in ("Authorization",
                       "Content-Type")}  # fmt: skip
            url = str(URL(upstream).origin()) + request.path_qs
            async with session.request(
                request.method, url, headers=headers, data=await request.read()
            ) as answer:
                body = await answer.read()
                status = answer.status
            if request.method == "POST" and request.path.endswith("/orders") and status == 201:
                order = json.loads(body)
                order["order"]["created_at"] = "2026-01-05T09:30:15Z"  # not the spec's form
                body = json.dumps(order).encode()
            return web.Response(status=status, body=body, content_type="application/json")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", forward)
        async with TestServer(app, host="127.0.0.1") as server:
            yield str(server.make_url(URL(upstream).path))


async def test_an_order_with_an_odd_field_is_recorded_as_ordered_with_its_id() -> None:
    async with (
        SandboxServer(speed=100.0, seed=5) as sandbox,
        odd_gateway(sandbox.base_url) as base_url,
    ):
        client = AsyncShippingClient(
            sandbox.token,
            base_url=base_url,
            clock=sandbox.clock,
            order_limiter=RollingWindowLimiter(20, 60.0, clock=sandbox.clock),
            decoding="lenient",
        )
        async with client:
            jobs = make_jobs(3)
            results = [result async for result in BulkShipper(client).run(jobs)]

    assert {result.status for result in results} == {ResultStatus.DONE}
    created = sandbox.control.requests(method="POST", path="/orders")
    assert sorted(r.order_id for r in results) == sorted(r.order_id for r in created)
    assert orders_created(sandbox) == {job.key: 1 for job in jobs}
