"""examples/rabbitmq_consumer.py against the real RabbitMQ on 127.0.0.1:5672 and the sandbox.

Judged by the broker (every message acknowledged or rejected, none left) and by the
sandbox's order list (each reference ordered once), never by the consumer's own view.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import msgspec
import pytest

from shipping_async.bulk.results import ResultStatus, ShipmentResult
from shipping_async.bulk.shipper import BulkShipper
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import client_for, make_jobs, orders_created

aio_pika = pytest.importorskip("aio_pika", reason="the [rabbitmq] extra (in [dev])")

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "rabbitmq_consumer.py"
SPEED = 100.0


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rabbitmq_consumer_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def channel() -> AsyncIterator[object]:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=16)
        yield channel


@pytest.fixture
async def queue_name(channel: object) -> AsyncIterator[str]:
    name = f"shipments-{uuid.uuid4().hex[:8]}"
    await channel.declare_queue(name)  # type: ignore[attr-defined]
    yield name
    await channel.queue_delete(name)  # type: ignore[attr-defined]


async def publish(channel: object, queue: str, bodies: list[bytes]) -> None:
    exchange = channel.default_exchange  # type: ignore[attr-defined]
    for body in bodies:
        await exchange.publish(aio_pika.Message(body=body), routing_key=queue)


async def left_in(channel: object, name: str) -> int:
    queue = await channel.declare_queue(name, passive=True)  # type: ignore[attr-defined]
    count: int = queue.declaration_result.message_count
    return count


async def test_each_message_is_acknowledged_once_its_job_is_settled(
    example: ModuleType, channel: object, queue_name: str
) -> None:
    name = queue_name
    queue = await channel.declare_queue(name)  # type: ignore[attr-defined]
    jobs = make_jobs(3)
    encoded = [msgspec.json.encode(job) for job in jobs]
    # One redelivered while in flight, one body that is not a shipment.
    await publish(channel, name, [*encoded, encoded[0], b'{"not": "a shipment"}'])
    results: list[ShipmentResult] = []
    async with SandboxServer(speed=SPEED, seed=31) as sandbox, client_for(sandbox) as client:
        consumer = example.QueueShipper(queue, BulkShipper(client))

        async def consume() -> None:
            async for result in consumer.run():
                results.append(result)

        running = asyncio.create_task(consume())
        async with asyncio.timeout(20):
            while len(results) < 3:  # noqa: ASYNC110 - the consumer yields no event
                await asyncio.sleep(0.01)
        # The queue now waits for its next message: stop must still end the run at once.
        stopping = time.monotonic()
        consumer.stop()
        await asyncio.wait_for(running, 5)
        stopped = time.monotonic() - stopping
        ordered = orders_created(sandbox)

    assert Counter(r.status for r in results) == {ResultStatus.DONE: 3}
    assert ordered == {job.key: 1 for job in jobs}
    assert await left_in(channel, name) == 0  # acknowledged (and the bad one rejected)
    assert stopped < 2.0


async def test_a_message_whose_job_did_not_finish_goes_back_to_the_queue(
    example: ModuleType, channel: object, queue_name: str
) -> None:
    name = queue_name
    queue = await channel.declare_queue(name)  # type: ignore[attr-defined]
    await publish(channel, name, [msgspec.json.encode(job) for job in make_jobs(2)])
    async with SandboxServer(speed=SPEED, seed=32) as sandbox, client_for(sandbox) as client:
        # Quotes answer after 1 real second: both jobs are in flight, none ordered yet.
        sandbox.control.add_fault("delay", "/quotes", method="POST", count=2, seconds=100)
        consumer = example.QueueShipper(queue, BulkShipper(client))
        seen: list[ShipmentResult] = []

        async def consume() -> None:
            async for result in consumer.run():
                seen.append(result)

        running = asyncio.create_task(consume())
        async with asyncio.timeout(10):
            while len(sandbox.control.requests(method="POST", path="/quotes")) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        consumer.stop()
        await asyncio.wait_for(running, 5)
        ordered = orders_created(sandbox)
    assert seen == []
    assert not ordered
    async with asyncio.timeout(5):
        # Both went back to the queue, for the next consumer.
        while await left_in(channel, name) != 2:  # noqa: ASYNC110 - broker state
            await asyncio.sleep(0.02)
