"""A fake shipping API for unit tests of the runner: a ShippingClient on a ManualClock.

Like httpx's ``MockTransport``, it is injected, not patched in: the pipeline and the
runner see a client whose POST /orders holds a permit of a real
:class:`~shipping_async.limiter.RollingWindowLimiter` through the SDK's own
``send_with_retries`` (so 429 pauses and the order intent hooks behave as with the real
client), and whose answers a test scripts and holds back at will.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from shipping_async._retry import Operation, RetryPolicy
from shipping_async._send import send_with_retries
from shipping_async._send_gate import send_gate
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.bulk.worker import Worker
from shipping_async.clock import ManualClock
from shipping_async.errors import APIError, RateLimitError
from shipping_async.limiter import RollingWindowLimiter
from shipping_async.models import (
    Order,
    OrderRequest,
    PickupAvailability,
    Quote,
    QuoteRequest,
    ScheduledPickup,
    SchedulePickupRequest,
    decoder,
)
from tests.bulk.support import make_job
from tests.resources import support


def _decode(type_: Any, body: Any) -> Any:
    return decoder(type_).decode(json.dumps(body))


def rate_limited() -> RateLimitError:
    """The API's 429 on POST /orders."""
    return RateLimitError(
        status=429,
        error="Rate limit exceeded: 20 of 20 in 60 seconds",
        errors=[],
        body=b"",
        method="POST",
        path="/orders",
        retry_after=None,
    )


class _Quotes:
    def __init__(self, api: FakeAPI) -> None:
        self._api = api

    async def create(self, request: QuoteRequest, /) -> Quote:
        self._api.calls["POST /quotes"] += 1
        quote: Quote = _decode(Quote, support.direct_quote())
        return quote

    async def get(self, quote_id: int, /) -> Quote:
        self._api.calls["GET /quotes"] += 1
        quote: Quote = _decode(Quote, support.direct_quote())
        return quote


class _Orders:
    def __init__(self, api: FakeAPI) -> None:
        self._api = api

    async def create(self, request: OrderRequest, /) -> Order:
        api = self._api
        reference = request.customer_reference or ""

        async def attempt() -> Order:
            gate = send_gate.get()
            if gate is not None:  # as the client's JSON body does, right before its write
                await gate.open()
            api.sent.append(reference)  # on the wire
            if api.answers:
                answer = api.answers.pop(0)
                if answer is not None:
                    raise answer
            await api.in_flight(reference)
            api.created[reference] += 1
            order: Order = _decode(
                Order, support.order(id=1000 + len(api.sent), customer_reference=reference)
            )
            return order

        operation = Operation(
            name="create_order", method="POST", path="/orders", customer_reference=reference
        )
        return await send_with_retries(
            attempt,
            operation=operation,
            policy=RetryPolicy(max_retries=0),
            clock=api.clock,
            limiter=api.order_limiter,
            gate_at_write=True,
        )

    async def get(self, order_id: int, /) -> Order:
        order: Order = _decode(Order, support.order(id=order_id))
        return order

    async def create_waybill(self, order_id: int, /) -> Order:
        self._api.calls[f"POST /orders/{order_id}/waybill"] += 1
        order: Order = _decode(Order, support.order(id=order_id))
        return order

    async def pickup_availabilities(self, order_id: int, /) -> list[PickupAvailability]:
        slots: list[PickupAvailability] = _decode(
            list[PickupAvailability], support.pickup_availabilities()
        )
        return slots

    async def schedule_pickup(
        self, order_id: int, request: SchedulePickupRequest, /
    ) -> ScheduledPickup:
        self._api.calls[f"POST /orders/{order_id}/pickup"] += 1
        booked: ScheduledPickup = _decode(ScheduledPickup, support.scheduled_pickup())
        return booked


class FakeAPI:
    """A :class:`~shipping_async.bulk.pipeline.ShippingClient` and the server behind it.

    ``sent`` lists the customer reference of every POST /orders that went on the wire,
    ``created`` counts the orders created per reference. ``answers`` scripts the next
    POST /orders answers (an error to raise, or ``None`` for a normal 201). ``hold(ref)``
    keeps that reference's POST /orders in flight until ``let_go(ref)``.
    """

    def __init__(self, clock: ManualClock, *, limit: int = 20, window: float = 60.0) -> None:
        self.clock = clock
        self.order_limiter = RollingWindowLimiter(limit, window, clock=clock)
        self.quotes = _Quotes(self)
        self.orders = _Orders(self)
        self.sent: list[str] = []
        self.created: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.answers: list[APIError | None] = []
        self._held: dict[str, asyncio.Event] = {}
        self.reached: dict[str, asyncio.Event] = {}

    def hold(self, reference: str) -> None:
        self._held[reference] = asyncio.Event()
        self.reached[reference] = asyncio.Event()

    def let_go(self, reference: str) -> None:
        self._held[reference].set()

    async def in_flight(self, reference: str) -> None:
        if reference in self._held:
            self.reached[reference].set()
            await self._held[reference].wait()


async def settle(rounds: int = 10) -> None:
    """Let every runnable task reach its next wait (journal writes run on a thread)."""
    for _ in range(rounds):
        for _ in range(50):
            await asyncio.sleep(0)
        await asyncio.sleep(0.002)


async def held_accounts(
    journal: SQLiteJournal, clock: ManualClock, accounts: Sequence[str], per_account: int
) -> tuple[dict[str, FakeAPI], list[str]]:
    """A FakeAPI per account and ``per_account`` jobs of each in ``journal`` (keys
    ``{account}-{index}``), every POST /orders held in flight until :func:`let_go_all`."""
    apis = {account: FakeAPI(clock) for account in accounts}
    keys = [f"{account}-{index}" for account in accounts for index in range(per_account)]
    await journal.add(
        [msgspec.structs.replace(make_job(key), account=key.split("-")[0]) for key in keys]
    )
    for api in apis.values():
        for key in keys:
            api.hold(key)
    return apis, keys


def let_go_all(apis: Mapping[str, FakeAPI], keys: Iterable[str]) -> None:
    """Let every held POST /orders of ``keys`` answer."""
    for key in keys:
        for api in apis.values():
            api.let_go(key)


def drain(worker: Worker) -> tuple[asyncio.Task[None], list[str]]:
    """``worker`` run in a task (the caller awaits it), and the keys of its results as
    they come."""
    results: list[str] = []

    async def run() -> None:
        async for result in worker.run():
            results.append(result.key)

    return asyncio.create_task(run()), results
