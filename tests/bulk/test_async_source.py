"""A queue as the source: each job starts as it arrives, each result comes as it finishes,
and stop() ends the run while the source waits for its next item."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from shipping_async.bulk.jobs import ShipmentJob
from shipping_async.bulk.results import ResultStatus, ShipmentResult
from shipping_async.bulk.shipper import BulkShipper
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import client_for, make_jobs

SPEED = 100.0


async def stalled(queue: asyncio.Queue[ShipmentJob]) -> AsyncIterator[ShipmentJob]:
    """What a message-queue consumer looks like: waits, possibly for ever, for the next."""
    while True:
        yield await queue.get()


async def test_a_job_from_a_stalled_source_starts_and_finishes_without_more_arriving() -> None:
    queue: asyncio.Queue[ShipmentJob] = asyncio.Queue()
    results: asyncio.Queue[ShipmentResult] = asyncio.Queue()
    async with SandboxServer(speed=SPEED, seed=21) as sandbox, client_for(sandbox) as client:
        shipper = BulkShipper(client)

        async def run() -> None:
            async for result in shipper.run(stalled(queue)):
                await results.put(result)

        running = asyncio.create_task(run())
        await asyncio.sleep(0.1)  # the run waits on an empty source
        jobs = make_jobs(3)
        arrived = time.monotonic()
        queue.put_nowait(jobs[0])
        async with asyncio.timeout(5):
            while not sandbox.control.requests(method="POST", path="/quotes"):  # noqa: ASYNC110
                await asyncio.sleep(0.002)
        started = time.monotonic() - arrived
        first = await asyncio.wait_for(results.get(), 10)
        queue.put_nowait(jobs[1])
        second = await asyncio.wait_for(results.get(), 10)

        stopping = time.monotonic()
        shipper.stop()  # the source is waiting for its next item
        await asyncio.wait_for(running, 5)
        stopped = time.monotonic() - stopping

    assert (first.key, first.status) == (jobs[0].key, ResultStatus.DONE)
    assert (second.key, second.status) == (jobs[1].key, ResultStatus.DONE)
    # Bounds with slack for a loaded machine; benchmarks/queue_source.py measures them.
    assert started < 0.5
    assert stopped < 2.0


async def test_a_failing_source_ends_the_run_with_its_error() -> None:
    async def broken() -> AsyncIterator[ShipmentJob]:
        yield make_jobs(1)[0]
        raise ConnectionError("broker went away")

    async with SandboxServer(speed=SPEED, seed=22) as sandbox, client_for(sandbox) as client:
        shipper = BulkShipper(client)
        seen: list[ShipmentResult] = []
        try:
            async for result in shipper.run(broken()):
                seen.append(result)
        except* ConnectionError as caught:
            error = caught
        else:
            error = None
    assert error is not None
    assert "broker went away" in str(error.exceptions[0])
