"""The request log is bounded: unauthenticated requests are only counted, and the log keeps
the latest ``request_log_size`` records."""

from __future__ import annotations

import asyncio

import aiohttp

from shipping_async.sandbox import SandboxServer

from .support import TOKEN


async def test_unauthenticated_requests_with_long_paths_are_not_logged() -> None:
    long_path = "/orders/" + "x" * 4000
    async with SandboxServer(token=TOKEN, speed=100) as sandbox, aiohttp.ClientSession() as http:
        url = sandbox.base_url + long_path

        async def anonymous() -> int:
            async with http.get(url) as response:
                return response.status

        statuses = await asyncio.gather(*(anonymous() for _ in range(500)))

        assert set(statuses) == {401}
        assert sandbox.control.requests() == []
        assert sandbox.control.refused_requests() == 500


async def test_the_log_keeps_the_latest_records_up_to_its_size() -> None:
    async with (
        SandboxServer(token=TOKEN, speed=100, request_log_size=5) as sandbox,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
    ):
        for number in range(1, 13):
            async with http.get(f"{sandbox.base_url}/orders/{number}") as response:
                assert response.status == 404

        records = sandbox.control.requests()

    assert [record.path for record in records] == [f"/orders/{n}" for n in range(8, 13)]
    assert [record.id for record in records] == list(range(8, 13))
