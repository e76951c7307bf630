"""Ship the shipments of a RabbitMQ queue, acknowledging each message once its job is settled.

    pip install 'shipping-async[rabbitmq]'
    SHIPPING_ACCESS_TOKEN=... SHIPPING_BASE_URL=https://.../client_api/v2 \\
        python examples/rabbitmq_consumer.py --amqp amqp://guest:guest@127.0.0.1/ \\
        --queue shipments --journal shipments.journal

Each message body is one shipment: a :class:`~shipping_async.bulk.ShipmentJob` as JSON
(``msgspec.json.encode(job)``), at most 64 KiB. A body that does not decode is rejected
without requeue (dead-lettered when the queue has a dead-letter exchange) and logged by its
delivery tag, never by its content.

Exactly once: the journal keeps every job by its key, so a message redelivered after a crash
finds its job where it was left (or finished) and is never ordered a second time. A message is
acknowledged when its job is settled (done, failed or unknown: see the journal and the log);
messages whose jobs did not finish when the consumer stopped are returned to the queue.
SIGINT or SIGTERM stops gracefully: no new job starts, jobs already ordered finish.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator

import aio_pika
import msgspec
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue

from shipping_async import AsyncShippingClient
from shipping_async.bulk import BulkShipper, ShipmentJob
from shipping_async.bulk.results import ShipmentResult

_log = logging.getLogger("rabbitmq_consumer")
MAX_BODY = 64 * 1024
_DECODER = msgspec.json.Decoder(ShipmentJob)


def decode(message: AbstractIncomingMessage) -> ShipmentJob | None:
    """The message's job, or ``None`` (logged) when the body is not one."""
    if len(message.body) > MAX_BODY:
        _log.warning("message %s: body over %d bytes; rejected", message.delivery_tag, MAX_BODY)
        return None
    try:
        return _DECODER.decode(message.body)
    except (msgspec.DecodeError, ValueError) as exc:
        # The reason names the field (msgspec: "... - at `$.order.customer_reference`"),
        # escaped, without quoting the rest of the body.
        reason = str(exc).encode("unicode_escape").decode("ascii")[:300]
        _log.warning("message %s: not a shipment (%s); rejected", message.delivery_tag, reason)
        return None


class QueueShipper:
    """Feeds a queue's messages into a :class:`BulkShipper`; acks each when its job settles.

    >>> consumer = QueueShipper(queue, BulkShipper(client, journal="q.journal"))  # doctest: +SKIP
    >>> async for result in consumer.run(): ...                                    # doctest: +SKIP
    """

    def __init__(self, queue: AbstractQueue, shipper: BulkShipper) -> None:
        self._queue = queue
        self._shipper = shipper
        self._pending: dict[str, list[AbstractIncomingMessage]] = {}

    def stop(self) -> None:
        """Take no more messages; jobs already ordered finish."""
        self._shipper.stop()

    async def run(self) -> AsyncIterator[ShipmentResult]:
        """Ship until stopped; yields each result after its message is acknowledged."""
        try:
            async for result in self._shipper.run(self._jobs()):
                for message in self._pending.pop(result.key, ()):
                    await message.ack()
                yield result
        finally:
            # Jobs not settled in this run go back to the queue for the next one.
            for messages in self._pending.values():
                for message in messages:
                    with contextlib.suppress(aio_pika.exceptions.AMQPError):
                        await message.nack(requeue=True)
            self._pending.clear()

    async def _jobs(self) -> AsyncIterator[ShipmentJob]:
        async with self._queue.iterator() as messages:
            async for message in messages:
                job = decode(message)
                if job is None:
                    await message.reject(requeue=False)
                    continue
                if job.key in self._pending:
                    # Redelivered while its job is in flight: acknowledged with the first.
                    self._pending[job.key].append(message)
                    continue
                self._pending[job.key] = [message]
                yield job


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--amqp", default="amqp://guest:guest@127.0.0.1/", help="broker URL")
    parser.add_argument("--queue", default="shipments", help="queue to consume (durable)")
    parser.add_argument("--journal", default="shipments.journal", help="journal file")
    parser.add_argument("--prefetch", type=int, default=64, help="unacknowledged messages")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    connection = await aio_pika.connect_robust(args.amqp)
    async with connection, AsyncShippingClient() as client:
        channel = await connection.channel()
        # The prefetch bounds how many jobs this process holds at once.
        await channel.set_qos(prefetch_count=args.prefetch)
        queue = await channel.declare_queue(args.queue, durable=True)
        consumer = QueueShipper(queue, BulkShipper(client, journal=args.journal))
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, consumer.stop)
        async for result in consumer.run():
            _log.info("%s: %s (order %s)", result.key, result.status, result.order_id)


if __name__ == "__main__":
    asyncio.run(main())
