"""A queue as the source: how soon a job that arrives starts, and how soon stop() returns.

Run: .venv/bin/python benchmarks/queue_source.py [--arrivals 40] [--stops 5] [--only memory,rabbitmq]
Needs RabbitMQ on 127.0.0.1:5672 (guest/guest) for the ``rabbitmq`` rows.

A sandbox runs in its own process (rate limit lifted). This process runs a ``BulkShipper``
fed by a source that waits, possibly for ever, for its next job, as a message-queue
consumer does; jobs arrive one at a time, each once the previous one is done (so the
source is stalled when it comes):

- ``memory``: an ``asyncio.Queue`` drained by an async generator;
- ``rabbitmq``: ``examples/rabbitmq_consumer.py``'s ``QueueShipper`` on a queue of the
  real broker; a job arrives when its message is published (publisher confirms on).

``start`` = from the arrival (the ``put``, or the confirmed publish) to the moment the
client sends the job's first request (POST /quotes, seen by a client hook), in ms.
``stop`` = from ``stop()`` to the end of the run, called while the source waits for its
next job after ``--arrivals`` jobs settled, in ms; ``--stops`` runs of each kind. The
issue's bounds: a job starts within 100 ms; stop() returns within 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from shipping_async import AsyncShippingClient, ClientHooks, RollingWindowLimiter
from shipping_async._hooks import APICall
from shipping_async.bulk import BulkShipper, ShipmentJob
from shipping_async.bulk.results import ResultStatus, ShipmentResult

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.bulk.support: the jobs the tests ship

from tests.bulk.support import make_jobs  # noqa: E402

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
TOKEN = "sbx_queue_source_benchmark_0123456789"
SPEED = 100.0


class FirstRequests(ClientHooks):
    """When each POST /quotes left, in order (time.monotonic)."""

    def __init__(self) -> None:
        self.sent: list[float] = []
        self.changed = asyncio.Event()

    def on_request(self, call: APICall) -> None:
        if call.method == "POST" and call.route == "/quotes":
            self.sent.append(time.monotonic())
            self.changed.set()


@contextlib.contextmanager
def sandbox_process() -> Iterator[str]:
    command = [sys.executable, "-m", "shipping_async", "sandbox", "--port", "0"]
    command += ["--token", TOKEN, "--speed", str(SPEED), "--rate-limit", "1000000"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("Sandbox listening on "):
            raise SystemExit(f"the sandbox did not start: {line!r}")
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(10)


def fresh_jobs(count: int) -> list[ShipmentJob]:
    return make_jobs(count, prefix=f"QS-{uuid.uuid4().hex[:8]}")


async def wait_sent(hooks: FirstRequests, count: int) -> float:
    while len(hooks.sent) < count:
        hooks.changed.clear()
        await hooks.changed.wait()
    return hooks.sent[count - 1]


# A source kind: given the shipper and a place to put results, returns
# (push(job) -> arrival time, run the consumer, stop).
Kind = Callable[
    [BulkShipper, asyncio.Queue[ShipmentResult]],
    Awaitable[
        tuple[Callable[[ShipmentJob], Awaitable[float]], Awaitable[None], Callable[[], None]]
    ],
]


async def memory_kind(
    shipper: BulkShipper, results: asyncio.Queue[ShipmentResult]
) -> tuple[Callable[[ShipmentJob], Awaitable[float]], Awaitable[None], Callable[[], None]]:
    queue: asyncio.Queue[ShipmentJob] = asyncio.Queue()

    async def source() -> AsyncIterator[ShipmentJob]:
        while True:
            yield await queue.get()

    async def push(job: ShipmentJob) -> float:
        arrived = time.monotonic()
        queue.put_nowait(job)
        return arrived

    async def consume() -> None:
        async for result in shipper.run(source()):
            await results.put(result)

    return push, consume(), shipper.stop


def load_example() -> ModuleType:
    path = ROOT / "examples" / "rabbitmq_consumer.py"
    spec = importlib.util.spec_from_file_location("rabbitmq_consumer_example", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rabbitmq_kind(channel: Any, example: ModuleType) -> Kind:
    async def make(
        shipper: BulkShipper, results: asyncio.Queue[ShipmentResult]
    ) -> tuple[Callable[[ShipmentJob], Awaitable[float]], Awaitable[None], Callable[[], None]]:
        import aio_pika

        name = f"queue-source-{uuid.uuid4().hex[:8]}"
        queue = await channel.declare_queue(name, auto_delete=True)
        consumer = example.QueueShipper(queue, shipper)

        async def push(job: ShipmentJob) -> float:
            message = aio_pika.Message(body=msgspec.json.encode(job))
            await channel.default_exchange.publish(message, routing_key=name)
            return time.monotonic()  # confirmed by the broker: the job is in the queue

        async def consume() -> None:
            async for result in consumer.run():
                await results.put(result)

        return push, consume(), consumer.stop

    return make


async def measure(kind: Kind, base_url: str, arrivals: int) -> tuple[list[float], float]:
    """Start latencies (ms) of ``arrivals`` jobs, then stop()'s latency (ms)."""
    hooks = FirstRequests()
    # The client's budget lifted too (the default is the API's 20 per 60 s): a job's quote
    # waits for its turn to order, and the 21st job would wait a minute for it.
    limiter = RollingWindowLimiter(1_000_000, 1.0)
    client = AsyncShippingClient(TOKEN, base_url=base_url, hooks=[hooks], order_limiter=limiter)
    async with client:
        shipper = BulkShipper(client)
        results: asyncio.Queue[ShipmentResult] = asyncio.Queue()
        push, consume, stop = await kind(shipper, results)
        running = asyncio.ensure_future(consume)
        await asyncio.sleep(0.2)  # the run is up and waits on an empty source
        starts: list[float] = []
        for index, job in enumerate(fresh_jobs(arrivals), start=1):
            arrived = await push(job)
            sent = await asyncio.wait_for(wait_sent(hooks, index), 10)
            starts.append((sent - arrived) * 1000)
            result = await asyncio.wait_for(results.get(), 30)
            if result.status is not ResultStatus.DONE:
                raise SystemExit(f"{result.key}: {result.status} ({result.error})")
        await asyncio.sleep(0.05)  # the source waits for its next job again
        stopping = time.monotonic()
        stop()
        await asyncio.wait_for(running, 30)
        return starts, (time.monotonic() - stopping) * 1000


def describe(label: str, starts: list[float], stops: list[float]) -> str:
    ordered = sorted(starts)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return (
        f"| {label} | {len(starts)} | {statistics.median(starts):.1f} | {p95:.1f} | "
        f"{max(starts):.1f} | {len(stops)} | {statistics.median(stops):.1f} | {max(stops):.1f} |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrivals", type=int, default=40, help="jobs per run, one at a time")
    parser.add_argument("--stops", type=int, default=5, help="runs (each ends with a stop)")
    parser.add_argument("--only", default="memory,rabbitmq", help="which sources")
    args = parser.parse_args()
    kinds: dict[str, Kind] = {}
    connection = None
    if "memory" in args.only:
        kinds["asyncio.Queue"] = memory_kind
    if "rabbitmq" in args.only:
        import aio_pika

        connection = await aio_pika.connect(AMQP_URL)
        channel = await connection.channel(publisher_confirms=True)
        kinds["RabbitMQ (aio-pika)"] = rabbitmq_kind(channel, load_example())
    print(
        f"one job at a time from a stalled source; {args.arrivals} arrivals x {args.stops} runs "
        "per row; sandbox in its own process (speed 100, limit lifted)"
    )
    print(
        "| source | jobs | start p50 ms | start p95 ms | start max ms | stops | stop p50 ms "
        "| stop max ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    try:
        with sandbox_process() as base_url:
            for label, kind in kinds.items():
                starts: list[float] = []
                stops: list[float] = []
                for _ in range(args.stops):
                    run_starts, stopped = await measure(kind, base_url, args.arrivals)
                    starts += run_starts
                    stops.append(stopped)
                print(describe(label, starts, stops), flush=True)
    finally:
        if connection is not None:
            await connection.close()


if __name__ == "__main__":
    from shipping_async.cli._loop import run

    run(main())
