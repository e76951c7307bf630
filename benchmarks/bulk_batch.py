"""Bulk batch time against the bound, and 429s: BulkShipper vs a naive loop vs aiolimiter.

Run: .venv/bin/python benchmarks/bulk_batch.py [--n 200] [--speed 100]

Each variant ships N jobs against its own in-process sandbox at ``speed`` (a 60 s window
lasts 60/speed real seconds). The bound is ``60 * (ceil(N/20) - 1)`` protocol seconds:
the last 20 orders cannot leave earlier. Acceptance: BulkShipper <= 1.10 x bound, no 429.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiolimiter import AsyncLimiter

from shipping_async._client import AsyncShippingClient
from shipping_async.bulk.choice import cheapest
from shipping_async.bulk.shipper import BulkShipper
from shipping_async.clock import Clock
from shipping_async.limiter import Permit, RollingWindowLimiter
from shipping_async.models import choose_pickup_window
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import make_jobs


class AioLimiterAdapter:
    """``aiolimiter.AsyncLimiter(20, window)`` behind the OrderLimiter protocol."""

    def __init__(self, limit: int, window: float, clock: Clock) -> None:
        self._bucket = AsyncLimiter(limit, window / clock.speed)  # type: ignore[attr-defined]
        self._clock = clock
        self._paused_until = 0.0
        self.limit, self.window = limit, window

    async def acquire(self, *, front: bool = False) -> Permit:
        while (wait := self._paused_until - self._clock.monotonic()) > 0:
            await self._clock.sleep(wait)
        await self._bucket.acquire()
        return Permit(id="x", acquired_at=self._clock.monotonic())

    async def release(self, permit: Permit, *, sent: bool) -> None:
        return None

    async def pause(
        self, seconds: float, *, limit: int | None = None, window: float | None = None
    ) -> None:
        self._paused_until = max(self._paused_until, self._clock.monotonic() + seconds)


async def naive(client: AsyncShippingClient, n: int) -> None:
    choose = cheapest()
    for job in make_jobs(n, "SEQ"):
        quote = await client.quotes.create(job.quote)
        order = await client.orders.create(job.order.to_request(choose(quote).estimate_id))
        await client.orders.create_waybill(order.id)
        slots = await client.orders.pickup_availabilities(order.id)
        window = choose_pickup_window(slots, job.pickup, now=client.clock.now())
        await client.orders.schedule_pickup(order.id, window.request)


async def shipper(client: AsyncShippingClient, n: int) -> None:
    async for result in BulkShipper(client).run(make_jobs(n)):
        assert result.status.value == "done", result.error


async def measure(name: str, n: int, speed: float, variant: str) -> tuple[str, float, int, int]:
    async with SandboxServer(speed=speed, seed=1) as sandbox:
        clock = sandbox.clock
        limiter = (
            AioLimiterAdapter(20, 60.0, clock)
            if variant == "aiolimiter"
            else RollingWindowLimiter(20, 60.0, clock=clock)
        )
        async with AsyncShippingClient(
            sandbox.token,
            base_url=sandbox.base_url,
            order_limiter=limiter,
            clock=clock,
            max_rate_limit_retries=50,
        ) as client:
            started = time.monotonic()
            await (naive(client, n) if variant == "naive" else shipper(client, n))
            elapsed = time.monotonic() - started
        log = sandbox.control.requests(method="POST", path="/orders")
        statuses = Counter(record.status for record in log)
        created = Counter(r.customer_reference for r in log if r.order_id is not None)
        if len(created) != n or max(created.values()) != 1:
            raise SystemExit(f"{name}: lost or duplicated orders")
        return name, elapsed, statuses[429], len(created)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--speed", type=float, default=100.0)
    args = parser.parse_args()
    bound = 60 * (math.ceil(args.n / 20) - 1) / args.speed
    rows = [
        await measure("naive sequential loop", args.n, args.speed, "naive"),
        await measure(
            "pipeline + aiolimiter.AsyncLimiter(20, 60)", args.n, args.speed, "aiolimiter"
        ),
        await measure("BulkShipper + RollingWindowLimiter", args.n, args.speed, "shipper"),
    ]
    print(
        f"N = {args.n}, sandbox speed {args.speed:g} (60 s window = {60 / args.speed:g} s real), "
        f"bound = 60 * (ceil(N/20) - 1) = {bound:.2f} s real"
    )
    print(f"| {'variant':<44} | {'batch s':>8} | {'/ bound':>7} | {'429s':>5} | {'orders':>6} |")
    print(f"|{'-' * 46}|{'-' * 10}|{'-' * 9}|{'-' * 7}|{'-' * 8}|")
    for name, elapsed, too_many, created in rows:
        print(
            f"| {name:<44} | {elapsed:>8.2f} | {elapsed / bound:>7.3f} | {too_many:>5} | {created:>6} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
