"""A webhook receiver on loopback that records deliveries and answers as told."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Delivery:
    content_type: str
    body: dict[str, Any]


@dataclass
class Receiver:
    url: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    statuses: deque[int] = field(default_factory=deque)  # answered first, in order
    default_status: int = 200
    hang: bool = False
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.deliveries.append(Delivery(request.content_type, json.loads(await request.read())))
        self.arrived.set()
        if self.hang:
            await asyncio.sleep(30)
        status = self.statuses.popleft() if self.statuses else self.default_status
        return web.Response(status=status)

    async def wait_for(self, count: int) -> None:
        """Wait until ``count`` deliveries have arrived."""
        async with asyncio.timeout(10):
            while len(self.deliveries) < count:
                self.arrived.clear()
                await self.arrived.wait()

    def bodies(self, event_type: str | None = None) -> list[dict[str, Any]]:
        return [
            d.body
            for d in self.deliveries
            if event_type is None or d.body["event_type"] == event_type
        ]


@asynccontextmanager
async def running_receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        yield receiver
    finally:
        await runner.cleanup()
