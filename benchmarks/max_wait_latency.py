"""Benchmark: how late ``OrderWaitTimeoutError`` arrives after ``max_wait``, per limiter.

Each trial spends the limiter's only permit (limit 1, a 60 s window), then calls
``orders.create(..., max_wait=W)``: no permit can come in time, so the error must arrive
at W. The table shows how late it came (real milliseconds after W: median, p99, worst)
for the in-process limiter and, when Redis answers on 127.0.0.1:6379, the Redis one.
Nothing is ever sent (the base URL is never contacted).

    .venv/bin/python benchmarks/max_wait_latency.py [--trials 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from shipping_async import (
    Address,
    AsyncShippingClient,
    OrderLimiter,
    OrderRequest,
    OrderWaitTimeoutError,
    RollingWindowLimiter,
)

REQUEST = OrderRequest(
    origin_address=Address(name="A", address_1="1 Main St", city="Oakland", country_id=840),
    destination_address=Address(name="B", address_1="Torstr 1", city="Berlin", country_id=276),
    quote_estimate_id=1,
    purpose_of_shipment_id=1,
    customer_reference="BENCH-1",
    description_of_contents="books",
    pickup_instructions="",
)


@asynccontextmanager
async def in_process() -> AsyncIterator[OrderLimiter]:
    yield RollingWindowLimiter(1, 60.0)


@asynccontextmanager
async def redis() -> AsyncIterator[OrderLimiter]:
    from shipping_async.scaleout.redis_limiter import RedisOrderLimiter

    limiter = RedisOrderLimiter(
        "redis://127.0.0.1:6379/0",
        account="bench",
        limit=1,
        window=60.0,
        prefix=f"bench-{uuid.uuid4().hex[:8]}",
    )
    try:
        yield limiter
    finally:
        await limiter.aclose()


async def lateness(
    make: Callable[[], AbstractAsyncContextManager[OrderLimiter]], max_wait: float, trials: int
) -> list[float]:
    late: list[float] = []
    for _ in range(trials):
        async with make() as limiter:
            await limiter.release(await limiter.acquire(), sent=True)
            client = AsyncShippingClient(
                "bench-token", base_url="https://api.invalid/client_api/v2", order_limiter=limiter
            )
            started = time.perf_counter()
            try:
                await client.orders.create(REQUEST, max_wait=max_wait)
            except OrderWaitTimeoutError:
                late.append((time.perf_counter() - started - max_wait) * 1000)
            else:
                raise AssertionError("an order went out")
            await client.close()
    return late


async def redis_up() -> bool:
    try:
        async with redis() as limiter:
            await asyncio.wait_for(limiter.acquire(), 2.0)
    except Exception:
        return False
    return True


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args()
    limiters: list[tuple[str, Callable[[], AbstractAsyncContextManager[OrderLimiter]]]] = [
        ("in-process", in_process)
    ]
    if await redis_up():
        limiters.append(("Redis", redis))
    print(f"{args.trials} trials per row; lateness = real ms after max_wait")
    print("| limiter | max_wait s | median ms | p99 ms | worst ms |")
    print("|---|---:|---:|---:|---:|")
    for name, make in limiters:
        for max_wait in (0.05, 0.2, 1.0):
            late = sorted(await lateness(make, max_wait, args.trials))
            p99 = late[min(len(late) - 1, round(0.99 * (len(late) - 1)))]
            print(
                f"| {name} | {max_wait:g} | {statistics.median(late):.1f} | {p99:.1f} "
                f"| {late[-1]:.1f} |"
            )


if __name__ == "__main__":
    asyncio.run(main())
