"""``client.orders``: create (JSON or multipart), read, cancel, waybills and pickups."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Unpack

from shipping_async._decode import Answer, read_answer
from shipping_async._http import RequestOptions, path_id
from shipping_async._multipart import FileSpec, load_files, order_form
from shipping_async._order_wait import expected_wait
from shipping_async._retry import Operation
from shipping_async.errors import (
    ConfigurationError,
    EstimateExpiredError,
    RequestValidationError,
)
from shipping_async.models import (
    Model,
    Order,
    OrderRequest,
    PickupAvailability,
    ScheduledPickup,
    SchedulePickupRequest,
)
from shipping_async.models._base import validated_json
from shipping_async.models.orders import _OrderEnvelope
from shipping_async.resources._order_create import create_order
from shipping_async.resources._success import SUCCESS

if TYPE_CHECKING:
    from shipping_async._client import AsyncShippingClient

__all__ = ["Orders"]


class _ScheduledPickupEnvelope(Model):
    scheduled_pickup: ScheduledPickup


def _order(envelope: _OrderEnvelope) -> Order:
    return envelope.order


def _scheduled_pickup(envelope: _ScheduledPickupEnvelope) -> ScheduledPickup:
    return envelope.scheduled_pickup


def _availabilities(availabilities: list[PickupAvailability]) -> list[PickupAvailability]:
    return availabilities


# An order answer counts once its id is read: a 201 with that id proves the order exists.
_ORDER = Answer(wire=_OrderEnvelope, unwrap=_order, identity=(("order.id",),), strip=("order",))
_AVAILABILITIES = Answer(wire=list[PickupAvailability], unwrap=_availabilities)
# A booking is identified by its confirmation number; a carrier's refusal by its message.
_SCHEDULED_PICKUP = Answer(
    wire=_ScheduledPickupEnvelope,
    unwrap=_scheduled_pickup,
    identity=(
        ("scheduled_pickup.confirmation_number",),
        ("scheduled_pickup.error_message",),
    ),
    strip=("scheduled_pickup",),
)


class Orders:
    """Orders: created from a quote estimate, then waybill, pickup, tracking, cancel."""

    __slots__ = ("_client",)

    def __init__(self, client: AsyncShippingClient) -> None:
        self._client = client

    async def create(
        self,
        request: OrderRequest,
        *,
        files: Mapping[str, FileSpec] | None = None,
        max_wait: float | None = None,
        **options: Unpack[RequestOptions],
    ) -> Order:
        """POST /orders: ``{"order": {...}}`` as JSON, or multipart when ``files`` are given.

        ``files`` maps an :class:`~shipping_async.models.OrderDocument` value
        (``"commercial_invoice"``, ``"materials_safety_data_sheet"``) to the bytes, a path,
        or ``(filename, bytes, content_type)``.

        Each attempt holds a permit of the client's order limiter. A 429 pauses the
        limiter and re-sends this order first, up to ``max_rate_limit_retries`` times. The
        order is never re-sent when it may have arrived: a timeout or a dropped connection
        after sending raises ``OrderOutcomeUnknownError`` with the ``customer_reference``.

        ``max_wait`` (seconds of the client's clock; default the client's ``max_wait``)
        bounds the wait for permits: ``OrderWaitTimeoutError`` (a ``TimeoutError``) says
        nothing was created. Cancelled before the request left, nothing is sent; after,
        the SDK still reads the answer, records it (ledger, ``on_cancelled_order``, a log
        line naming the order id or "unknown"), then lets the cancellation through. With
        the client's ``order_ledger``, a reference already ordered returns that order
        without sending, and one whose earlier create is unresolved raises
        ``OrderOutcomeUnknownError`` without sending (settle it with :meth:`resolve`).
        """
        request, json = validated_json(request)
        operation = Operation(
            name="create_order",
            method="POST",
            path="/orders",
            customer_reference=request.customer_reference,
            route="/orders",
        )
        client = self._client
        form = order_form(request, await load_files(files)) if files else None
        return await create_order(
            client,
            operation,
            _ORDER,
            json=None if form is not None else b'{"order":' + json + b"}",
            form=form,
            recheck=functools.partial(self._recheck, request.quote_estimate_id),
            decode=self._decode,
            max_wait=client.max_wait if max_wait is None else max_wait,
            options=options,
        )

    def _recheck(self, estimate_id: int, waited: float) -> Awaitable[None] | None:
        """After a long wait for the permit: is the estimate still valid? (not sent if not)

        ``None`` when there is nothing to ask (the common case: no wait worth a GET)."""
        client = self._client
        seen = client.estimates.get(estimate_id)
        if seen is None:
            return None  # quoted elsewhere: the quote's id is unknown here
        quote_id, seen_at = seen
        validity = client.estimate_validity
        aged = validity is not None and client.clock.monotonic() - seen_at >= 0.9 * validity
        # Half a window of waiting is long enough for an estimate of unknown validity to
        # have expired meanwhile; the GET costs nothing against the order budget.
        if not aged and waited < client.order_limiter.window / 2:
            return None
        return self._still_valid(estimate_id, quote_id, waited)

    async def _still_valid(self, estimate_id: int, quote_id: int, waited: float) -> None:
        quote = await self._client.quotes.get(quote_id)
        try:
            expired = quote.estimate(estimate_id).quote_expired
        except KeyError:
            expired = True
        if expired:
            raise EstimateExpiredError(
                estimate_id,
                f"estimate {estimate_id} of quote {quote_id} expired while the order waited "
                f"{waited:.3g} s for its permit; nothing was sent: quote again",
            )

    def _decode(self, raw: bytes) -> Order:
        """An order answer kept by the ledger, read as the client reads answers."""
        return read_answer(raw, _ORDER, lenient=self._client.lenient, what="order ledger")

    def expected_wait(self) -> float | None:
        """Seconds a create started now would wait for its permit (``None``: unknown).

        An estimate from the limiter's :meth:`~shipping_async.OrderLimiter.next_free_at`
        and :meth:`~shipping_async.OrderLimiter.queued`, on the client's clock, for a
        handler to answer "busy, about N s" before it waits (or to pick ``max_wait``).
        """
        return expected_wait(self._client.order_limiter, self._client.clock)

    async def resolve(self, customer_reference: str, *, order_id: int | None) -> Order | None:
        """Settle a reference the order ledger holds unresolved: the one call after an
        ``OrderOutcomeUnknownError``.

        ``order_id``: the order found for it (fetched, checked to carry this reference,
        and recorded: the next create returns it); ``None``: no order exists, so the next
        create sends again. Returns the order, or ``None``.
        """
        ledger = self._client.order_ledger
        if ledger is None:
            raise ConfigurationError("orders.resolve needs a client with an order_ledger")
        if order_id is None:
            await ledger.resolve(customer_reference, order_id=None)
            return None
        answers: list[bytes] = []
        path = f"/orders/{path_id(order_id, 'order_id')}"
        operation = Operation(name="get_order", method="GET", path=path, route="/orders/{id}")
        order = await self._client._request(operation, _ORDER, raw_sink=answers.append)
        if order.customer_reference != customer_reference:
            raise RequestValidationError(
                "order_id",
                f"order {order_id} has customer_reference {order.customer_reference!r}, "
                f"not {customer_reference!r}",
            )
        await ledger.resolve(customer_reference, order_id=order.id, answer=answers[-1])
        return order

    async def get(self, order_id: int, **options: Unpack[RequestOptions]) -> Order:
        """GET /orders/{id}: the order with every leg in ``shipments`` (see ``Order.legs``)."""
        path = f"/orders/{path_id(order_id, 'order_id')}"
        operation = Operation(name="get_order", method="GET", path=path, route="/orders/{id}")
        return await self._client._request(operation, _ORDER, **options)

    async def cancel(self, order_id: int, **options: Unpack[RequestOptions]) -> None:
        """DELETE /orders/{id}: cancels the order and every leg.

        Raises ``OrderAlreadyLiveError`` once the order is in transit or later.
        """
        path = f"/orders/{path_id(order_id, 'order_id')}"
        operation = Operation(name="cancel_order", method="DELETE", path=path, route="/orders/{id}")
        await self._client._request(operation, SUCCESS, **options)

    async def create_waybill(self, order_id: int, **options: Unpack[RequestOptions]) -> Order:
        """POST /orders/{id}/waybills (body ``{}``): one waybill per leg, in ``legs``."""
        path = f"/orders/{path_id(order_id, 'order_id')}/waybills"
        operation = Operation(
            name="create_waybill", method="POST", path=path, route="/orders/{id}/waybills"
        )
        return await self._client._request(operation, _ORDER, json=b"{}", **options)

    async def pickup_availabilities(
        self, order_id: int, **options: Unpack[RequestOptions]
    ) -> list[PickupAvailability]:
        """GET /orders/{id}/pickup_availabilities (the first leg's, on a hub order).

        Feed the result to :func:`~shipping_async.models.choose_pickup_window`.
        """
        path = f"/orders/{path_id(order_id, 'order_id')}/pickup_availabilities"
        operation = Operation(
            name="list_pickup_availabilities",
            method="GET",
            path=path,
            route="/orders/{id}/pickup_availabilities",
        )
        return await self._client._request(operation, _AVAILABILITIES, **options)

    async def schedule_pickup(
        self, order_id: int, request: SchedulePickupRequest, **options: Unpack[RequestOptions]
    ) -> ScheduledPickup:
        """POST /orders/{id}/schedule_pickups. Times are in the availability's time zone.

        A carrier refusal is not an exception: check ``ScheduledPickup.rejected``.
        """
        request, _ = validated_json(request)
        path = f"/orders/{path_id(order_id, 'order_id')}/schedule_pickups"
        operation = Operation(
            name="schedule_pickup", method="POST", path=path, route="/orders/{id}/schedule_pickups"
        )
        return await self._client._request(
            operation, _SCHEDULED_PICKUP, body=request.to_wire(), **options
        )
