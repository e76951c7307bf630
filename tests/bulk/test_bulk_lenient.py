"""The bulk pipeline keeps an order whose answer had an odd field: ordered, with its id."""

from __future__ import annotations

import json

import aiohttp

from shipping_async._client import AsyncShippingClient
from shipping_async.bulk.results import ResultStatus
from shipping_async.bulk.shipper import BulkShipper
from shipping_async.limiter import RollingWindowLimiter
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import make_jobs, orders_created


async def _odd_created_at(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    """A gateway that rewrites every created order's ``created_at`` into something odd."""
    response = await handler(request)
    if request.method == "POST" and request.url.path.endswith("/orders"):
        body = json.loads(await response.read())
        body["order"]["created_at"] = "2026-01-05T09:30:15Z"
        response._body = json.dumps(body).encode()
    return response


async def test_an_order_with_an_odd_field_is_recorded_as_ordered_with_its_id() -> None:
    async with (
        SandboxServer(speed=100.0, seed=5) as sandbox,
        aiohttp.ClientSession(middlewares=(_odd_created_at,)) as session,
    ):
        client = AsyncShippingClient(
            sandbox.token,
            base_url=sandbox.base_url,
            session=session,
            clock=sandbox.clock,
            order_limiter=RollingWindowLimiter(20, 60.0, clock=sandbox.clock),
            decoding="lenient",
        )
        jobs = make_jobs(3)
        results = [result async for result in BulkShipper(client).run(jobs)]

    assert {result.status for result in results} == {ResultStatus.DONE}
    created = sandbox.control.requests(method="POST", path="/orders")
    assert sorted(r.order_id for r in results) == sorted(r.order_id for r in created)
    assert orders_created(sandbox) == {job.key: 1 for job in jobs}
