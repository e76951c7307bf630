"""Benchmark: RollingWindowLimiter against aiolimiter on a simulated sliding-window server.

N orders are submitted at once to an in-process server that accepts ``limit`` per sliding
``window`` (scaled down from the API's 20 per 60 s) and answers 429 beyond, with a text
like the API's. Each strategy runs against a fresh server; the table shows how long the
last order took to be accepted against the best any client can do,
``window * (ceil(N / limit) - 1)``, and how many 429s it provoked.

    .venv/bin/python benchmarks/limiter_vs_aiolimiter.py [--orders 100] [--window 0.6]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import re
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from aiolimiter import AsyncLimiter

from shipping_async.clock import Clock, SystemClock
from shipping_async.limiter import RollingWindowLimiter

RATE_TEXT = re.compile(r"(\d+) of (\d+) in ([\d.]+) seconds")


class SlidingWindowServer:
    """POST /orders with a sliding-window rate limit and a random round trip."""

    def __init__(
        self, clock: Clock, limit: int, window: float, latency: tuple[float, float], seed: int
    ) -> None:
        self.clock, self.limit, self.window, self.latency = clock, limit, window, latency
        self.rng = random.Random(seed)
        self.accepted: deque[float] = deque()  # arrival times within the last window
        self.last_accepted = 0.0
        self.refused = 0

    async def create_order(self) -> tuple[int, str]:
        round_trip = self.rng.uniform(*self.latency)
        await self.clock.sleep(round_trip / 2)
        now = self.clock.monotonic()
        # A closed span [now - window, now]: the strict reading of "20 per 60 s".
        while self.accepted and self.accepted[0] < now - self.window:
            self.accepted.popleft()
        if len(self.accepted) >= self.limit:
            self.refused += 1
            status, text = 429, f"{len(self.accepted)} of {self.limit} in {self.window:g} seconds"
        else:
            self.accepted.append(now)
            self.last_accepted = now
            status, text = 201, "created"
        await self.clock.sleep(round_trip / 2)
        return status, text


Send = Callable[[SlidingWindowServer], Coroutine[Any, Any, None]]  # one order, retried to success


def read_rate(text: str) -> tuple[int, float]:
    """The limit and window from a 429 text such as ``20 of 20 in 60 seconds``."""
    match = RATE_TEXT.search(text)
    assert match, text
    return int(match[2]), float(match[3])


def with_rolling_window(limiter: RollingWindowLimiter) -> Send:
    async def send(server: SlidingWindowServer) -> None:
        front = False
        while True:
            permit = await limiter.acquire(front=front)
            try:
                status, text = await server.create_order()
            finally:
                await limiter.release(permit, sent=True)
            if status != 429:
                return
            limit, window = read_rate(text)
            await limiter.pause(window, limit=limit, window=window)
            front = True

    return send


def with_aiolimiter(limiter: AsyncLimiter, clock: Clock) -> Send:
    async def send(server: SlidingWindowServer) -> None:
        while True:
            await limiter.acquire()
            status, text = await server.create_order()
            if status != 429:
                return
            await clock.sleep(read_rate(text)[1])  # wait the window the 429 names, retry

    return send


async def run(send: Send, server: SlidingWindowServer, orders: int) -> float:
    start = server.clock.monotonic()
    async with asyncio.TaskGroup() as group:
        for _ in range(orders):
            group.create_task(send(server))
    return server.last_accepted - start


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=100)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--window", type=float, default=0.6, help="seconds (the API: 60)")
    parser.add_argument("--latency", type=float, nargs=2, default=(0.002, 0.005))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    clock, limit, window = SystemClock(), args.limit, args.window
    strategies = {
        f"RollingWindowLimiter({limit}, w)": with_rolling_window(
            RollingWindowLimiter(limit, window, clock=clock)
        ),
        f"AsyncLimiter({limit}, w)": with_aiolimiter(AsyncLimiter(limit, window), clock),
        f"AsyncLimiter(1, w/{limit})": with_aiolimiter(AsyncLimiter(1, window / limit), clock),
    }
    bound = window * (math.ceil(args.orders / limit) - 1)
    print(
        f"{args.orders} orders at once; server: {limit} per sliding {window:g} s window, "
        f"round trip {args.latency[0] * 1000:g}-{args.latency[1] * 1000:g} ms; "
        f"w = {window:g} s\n"
    )
    print("| strategy | makespan (s) | bound (s) | makespan/bound | 429s |")
    print("|---|---:|---:|---:|---:|")
    for name, send in strategies.items():
        low, high = args.latency
        server = SlidingWindowServer(clock, limit, window, (low, high), args.seed)
        makespan = await run(send, server, args.orders)
        print(
            f"| {name} | {makespan:.3f} | {bound:.3f} | {makespan / bound if bound else math.nan:.3f} | "
            f"{server.refused} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
