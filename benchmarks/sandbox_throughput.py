"""How many GET /orders/{id} per second the sandbox answers, with the SDK as the load.

The sandbox runs in a child process (``python -m shipping_async sandbox --port 0``), so
the server and the client do not share an event loop or a core. This process creates a
few orders through ``AsyncShippingClient`` (direct and two-leg hub orders with waybills),
then reads them with ``client.orders.get``, for ``--duration`` seconds per row after an
uncounted warm-up:

- closed loop, one row per ``--concurrency`` level: that many tasks, each sending its next
  request when the previous one answered (the most the pair can do);
- open loop at ``--target`` requests/s (500): one request every 2 ms whether or not the
  earlier ones have answered, latency counted from the planned start. The sandbox holds
  the target when this row answers it all, without errors, with p99 under ``--p99-limit``.

    .venv/bin/python benchmarks/sandbox_throughput.py
    .venv/bin/python benchmarks/sandbox_throughput.py --concurrency 1 8 32 --duration 5

The CPU columns (Linux only) say which side is the bottleneck: a process at ~100 % is
using all of its one core.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from shipping_async import (
    Address,
    AsyncShippingClient,
    OrderRequest,
    Package,
    QuoteRequest,
    ShippingError,
)

TOKEN = "sbx_benchmark_token_0123456789abcdef"
SENDER = Address(name="Shipping Desk", address_1="1200 Harbor Blvd", city="Oakland", country_id=840)
TORONTO = Address(
    name="Olivia Tremblay", address_1="450 Queen St W", city="Toronto", country_id=124
)
BERLIN = Address(name="Lena Fischer", address_1="Torstrasse 101", city="Berlin", country_id=276)
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Row:
    load: str
    requests: int
    seconds: float
    latencies: list[float]
    errors: int
    server_cpu: float | None
    client_cpu: float | None

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def start_sandbox() -> tuple[subprocess.Popen[str], str]:
    """The sandbox in a child process; its base URL from the first line it prints."""
    command = [sys.executable, "-m", "shipping_async", "sandbox", "--port", "0", "--token", TOKEN]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    prefix = "Sandbox listening on "
    if not line.startswith(prefix):
        process.kill()
        raise RuntimeError(f"the sandbox did not start: {line!r}")
    return process, line.removeprefix(prefix)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc), else None."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


def quote_request(destination: Address, *, hub: bool) -> QuoteRequest:
    return QuoteRequest(
        origin_country_id=840,
        destination_country_id=destination.country_id,
        hub_transit=hub,
        is_document=False,
        is_stackable=True,
        is_liftgate_required=False,
        is_shipment_protection_required=False,
        purpose_of_shipment_id=1,
        value_of_goods=Decimal("120.00"),
        value_of_goods_currency_id="USD",
        mass_unit="kg",
        distance_unit="cm",
        packages=[Package(weight=2.5, length=30, width=20, height=10)],
    )


async def create_orders(client: AsyncShippingClient, count: int) -> list[int]:
    """``count`` orders with waybills, direct and hub (two legs) alternately."""
    order_ids = []
    for index in range(count):
        destination, hub = (BERLIN, True) if index % 2 else (TORONTO, False)
        quote = await client.quotes.create(quote_request(destination, hub=hub))
        order = await client.orders.create(
            OrderRequest(
                origin_address=SENDER,
                destination_address=destination,
                quote_estimate_id=quote.estimates[0].estimate_id,
                purpose_of_shipment_id=1,
                customer_reference=f"BENCH-{index}",
                description_of_contents="Hiking boots",
                pickup_instructions="Loading dock",
            )
        )
        await client.orders.create_waybill(order.id)
        order_ids.append(order.id)
    return order_ids


async def hammer(
    client: AsyncShippingClient, order_ids: Sequence[int], concurrency: int, seconds: float
) -> tuple[int, list[float], int]:
    """``concurrency`` tasks reading orders until ``seconds`` have passed."""
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker(offset: int) -> None:
        nonlocal errors
        index = offset
        while (started := time.perf_counter()) < deadline:
            try:
                await client.orders.get(order_ids[index % len(order_ids)])
            except ShippingError:
                errors += 1
            else:
                latencies.append(time.perf_counter() - started)
            index += 1

    async with asyncio.TaskGroup() as group:
        for offset in range(concurrency):
            group.create_task(worker(offset))
    return len(latencies) + errors, latencies, errors


async def pace(
    client: AsyncShippingClient, order_ids: Sequence[int], rate: float, seconds: float
) -> tuple[int, list[float], int]:
    """Open loop: one request every ``1/rate`` s, whether or not earlier ones have answered.

    Latency counts from the planned start, so a sandbox falling behind shows up in the
    percentiles instead of slowing the load down (no coordinated omission).
    """
    latencies: list[float] = []
    errors = 0
    start = time.perf_counter()
    total = int(rate * seconds)

    async def one(index: int, planned: float) -> None:
        nonlocal errors
        try:
            await client.orders.get(order_ids[index % len(order_ids)])
        except ShippingError:
            errors += 1
        else:
            latencies.append(time.perf_counter() - planned)

    async with asyncio.TaskGroup() as group:
        for index in range(total):
            planned = start + index / rate
            delay = planned - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            group.create_task(one(index, planned))
    return total, latencies, errors


async def measure(
    client: AsyncShippingClient,
    order_ids: list[int],
    args: argparse.Namespace,
    *,
    concurrency: int | None = None,
    rate: float | None = None,
) -> Row:
    """One row: closed loop with ``concurrency`` tasks, or open loop at ``rate``."""

    async def load(seconds: float) -> tuple[int, list[float], int]:
        if rate is not None:
            return await pace(client, order_ids, rate, seconds)
        assert concurrency is not None
        return await hammer(client, order_ids, concurrency, seconds)

    label = f"{concurrency}" if rate is None else f"paced {rate:g}/s"
    await load(args.warmup)
    server_before, client_before = cpu_seconds(args.server_pid), cpu_seconds(os.getpid())
    started = time.perf_counter()
    requests, latencies, errors = await load(args.duration)
    seconds = time.perf_counter() - started
    server_after, client_after = cpu_seconds(args.server_pid), cpu_seconds(os.getpid())
    server_cpu = client_cpu = None
    if server_before is not None and server_after is not None:
        server_cpu = 100 * (server_after - server_before) / seconds
    if client_before is not None and client_after is not None:
        client_cpu = 100 * (client_after - client_before) / seconds
    return Row(label, requests, seconds, latencies, errors, server_cpu, client_cpu)


def table(rows: list[Row]) -> str:
    def cpu(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.0f}"

    lines = [
        "| load (concurrency) | requests | seconds | requests/s | p50 ms | p99 ms | errors "
        "| sandbox CPU % | client CPU % |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.load} | {row.requests} | {row.seconds:.1f} | {row.rate:.0f} "
            f"| {row.percentile(0.50):.1f} | {row.percentile(0.99):.1f} | {row.errors} "
            f"| {cpu(row.server_cpu)} | {cpu(row.client_cpu)} |"
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace, base_url: str) -> list[Row]:
    async with AsyncShippingClient(TOKEN, base_url=base_url, max_retries=0) as client:
        order_ids = await create_orders(client, args.orders)
        rows = []
        for concurrency in [*args.concurrency, None]:
            if concurrency is None:  # last: the open loop at the target rate
                row = await measure(client, order_ids, args, rate=args.target)
            else:
                row = await measure(client, order_ids, args, concurrency=concurrency)
            print(f"{row.load}: {row.rate:.0f} requests/s", file=sys.stderr, flush=True)
            rows.append(row)
        return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    parser.add_argument("--warmup", type=float, default=1.0, help="uncounted seconds per level")
    parser.add_argument("--orders", type=int, default=6, help="orders to read in turn")
    parser.add_argument("--target", type=float, default=500.0, help="requests/s to hold")
    parser.add_argument(
        "--p99-limit", type=float, default=50.0, help="ms the paced p99 must stay under"
    )
    args = parser.parse_args()
    process, base_url = start_sandbox()
    args.server_pid = process.pid
    try:
        rows = asyncio.run(run(args, base_url))
    finally:
        process.terminate()
        process.wait(timeout=10)
    print(f"GET /orders/{{id}} against the sandbox ({os.cpu_count()} CPUs), SDK as the load:\n")
    print(table(rows))
    paced = rows[-1]
    held = (
        paced.rate >= 0.99 * args.target
        and paced.errors == 0
        and paced.percentile(0.99) < args.p99_limit
    )
    verdict = "holds" if held else "does NOT hold"
    best = max(rows[:-1], key=lambda row: row.rate)
    print(
        f"\nThe sandbox {verdict} {args.target:g} requests/s: paced at {args.target:g}/s it "
        f"answered {paced.rate:.0f}/s, p99 {paced.percentile(0.99):.1f} ms (limit "
        f"{args.p99_limit:g} ms), {paced.errors} errors. Most in a closed loop: "
        f"{best.rate:.0f}/s at concurrency {best.load}."
    )
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
