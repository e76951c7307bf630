"""One job's stages: quote just in time, order once, generate waybills, book the pickup.

Each stage commits its outcome to the journal before the next one starts. The order
stage is the careful one:

1. Quote (holding one of ``quote_ahead`` places, so that no more jobs are quoted than
   can be ordered in about one rate window: an estimate never waits long for its slot).
2. Queue at the :class:`~shipping_async.bulk._gate.OrderGate` until a permit is free.
3. Check the estimate is still valid: by age against ``estimate_validity`` when it is
   configured; else a quote younger than :data:`QUOTE_FRESHNESS` is trusted as it is,
   and an older one (or one quoted by an earlier run) is checked with ``GET /quotes/{id}``.
   Expired: quote again, back to 2.
4. ``begin_order`` (the intent, durable), then ``POST /orders`` at once.
5. 201: ``ORDERED``. A 400 whose estimate turns out expired: quote again. Any other
   refusal: ``FAILED`` (nothing was created). No answer, or a 5xx (the server may have
   created the order before failing): ``UNKNOWN``, never re-sent without reconciling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Protocol, Unpack

import msgspec

from shipping_async.bulk._gate import GateClosedError, OrderGate
from shipping_async.bulk.choice import EstimateChooser
from shipping_async.bulk.journal import JobFields, JobRecord, JobState, Journal
from shipping_async.bulk.results import Stage
from shipping_async.clock import Clock
from shipping_async.errors import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    BadRequestError,
    InternalServerError,
    NoHubForRouteError,
    NoPickupWindowError,
    OutcomeUnknownError,
    RateLimitError,
    ShippingError,
)
from shipping_async.limiter import OrderLimiter
from shipping_async.models import (
    Estimate,
    Order,
    OrderRequest,
    PickupAvailability,
    PickupWish,
    Quote,
    QuoteRequest,
    ScheduledPickup,
    SchedulePickupRequest,
    choose_pickup_window,
)

__all__ = ["QUOTE_FRESHNESS", "JobPipeline", "ShippingClient", "Stopped", "is_retryable"]

#: Seconds (of the API's clock) a quote made by this run is trusted without asking the
#: server whether its estimates expired. The spec does not say how long an estimate stays
#: valid; the sandbox keeps them 900 s, and an order refused for an expired estimate is
#: quoted again, never lost - so half a rate window costs at most one refused request.
QUOTE_FRESHNESS = 30.0


class _Quotes(Protocol):
    async def create(self, request: QuoteRequest, /) -> Quote: ...
    async def get(self, quote_id: int, /) -> Quote: ...


class _Orders(Protocol):
    async def create(self, request: OrderRequest, /) -> Order: ...
    async def get(self, order_id: int, /) -> Order: ...
    async def create_waybill(self, order_id: int, /) -> Order: ...
    async def pickup_availabilities(self, order_id: int, /) -> list[PickupAvailability]: ...
    async def schedule_pickup(
        self, order_id: int, request: SchedulePickupRequest, /
    ) -> ScheduledPickup: ...


class ShippingClient(Protocol):
    """What the pipeline uses of :class:`~shipping_async.AsyncShippingClient`."""

    @property
    def quotes(self) -> _Quotes: ...
    @property
    def orders(self) -> _Orders: ...
    @property
    def order_limiter(self) -> OrderLimiter: ...
    @property
    def clock(self) -> Clock: ...


class Stopped(Exception):
    """The run is stopping and this job had not started its order: it stays resumable."""


def is_retryable(error: BaseException) -> bool:
    """Whether trying the failed step again later may succeed (nothing about the job is wrong)."""
    if isinstance(error, OutcomeUnknownError):
        return False  # check what happened first
    if isinstance(error, APIConnectionError | InternalServerError | RateLimitError):
        return True
    if isinstance(error, APIResponseValidationError | NoPickupWindowError):
        return True
    if isinstance(error, APIStatusError):
        return error.status >= 500 or error.status == 408
    return False


class JobPipeline:
    """Runs jobs through their stages; one instance serves every job of a run."""

    def __init__(
        self,
        client: ShippingClient,
        journal: Journal,
        *,
        worker_id: str,
        choose: EstimateChooser,
        gate: OrderGate,
        quote_ahead: int,
        estimate_validity: float | None = None,
        max_requotes: int = 3,
        observe: Callable[[JobRecord], None] | None = None,
    ) -> None:
        self._client = client
        self._journal = journal
        self._worker = worker_id
        self._choose = choose
        self._gate = gate
        self._quote_places = asyncio.Semaphore(quote_ahead)
        self._validity = estimate_validity
        self._max_requotes = max_requotes
        self._clock = client.clock
        self._observe: Callable[[JobRecord], None] = observe or (lambda record: None)

    async def ship(self, record: JobRecord) -> JobRecord:
        """Take a claimed job from its current state to a finished one.

        Raises :class:`Stopped` when the run stops before the job's order was started,
        and :class:`LeaseLostError` when another worker took the job over.
        """
        if record.state in (JobState.PENDING, JobState.QUOTED):
            record = await self._order_stage(record)
        if record.state is JobState.ORDERED:
            record = await self._waybill_stage(record)
        if record.state is JobState.WAYBILLED:
            record = await self._pickup_stage(record)
        return record

    # -- quote and order -------------------------------------------------------------------

    async def _order_stage(self, record: JobRecord) -> JobRecord:
        await self._quote_places.acquire()
        holding = True
        try:
            if self._gate.closed:
                raise Stopped
            quoted_at: float | None = None  # monotonic; None: quoted by an earlier run
            for _ in range(self._max_requotes + 1):
                if record.state is JobState.PENDING:
                    record = await self._quote(record)
                    if record.state is not JobState.QUOTED:
                        return record
                    quoted_at = self._clock.monotonic()
                try:
                    await self._gate.admit()
                except GateClosedError:
                    raise Stopped from None
                if holding:  # admitted: the next job may quote now
                    self._quote_places.release()
                    holding = False
                try:
                    fresh = await self._still_valid(record, quoted_at)
                except ShippingError as exc:
                    self._gate.sending()  # not sending after all: give the turn back
                    return await self._fail(record, Stage.ORDER, exc)
                if not fresh:
                    self._gate.sending()
                    record = await self._record(record.key, JobState.PENDING)
                    continue
                outcome = await self._order(record)
                if outcome is not None:
                    return outcome
                record = await self._record(record.key, JobState.PENDING)
            return await self._fail(
                record, Stage.ORDER, f"the estimate expired {self._max_requotes + 1} times"
            )
        finally:
            if holding:
                self._quote_places.release()

    async def _quote(self, record: JobRecord) -> JobRecord:
        request = record.job.quote
        try:
            try:
                quote = await self._client.quotes.create(request)
            except NoHubForRouteError:
                # The API's remedy (spec section 7): repeat the quote as a direct quote.
                request = _direct(request)
                quote = await self._client.quotes.create(request)
            estimate = self._choose(quote)
        except (ShippingError, ValueError) as exc:
            return await self._fail(record, Stage.QUOTE, exc)
        return await self._record(
            record.key,
            JobState.QUOTED,
            quote_id=quote.id,
            estimate_id=estimate.estimate_id,
            carrier=estimate.shipping_company,
            service=estimate.shipping_service,
            cost=_total(estimate),
            currency=estimate.currency,
            hub=quote.hub_transit or request.hub_transit,
        )

    async def _still_valid(self, record: JobRecord, quoted_at: float | None) -> bool:
        if quoted_at is not None:
            age = self._clock.monotonic() - quoted_at
            if self._validity is not None:
                # Re-quote at 90 %: the order must also arrive before the estimate expires.
                return age < self._validity * 0.9
            if age < QUOTE_FRESHNESS:
                return True  # no GET /quotes/{id} seconds after the quote was made
        return not await self._expired(record)

    async def _expired(self, record: JobRecord) -> bool:
        assert record.quote_id is not None
        assert record.estimate_id is not None
        quote = await self._client.quotes.get(record.quote_id)
        try:
            return quote.estimate(record.estimate_id).quote_expired
        except KeyError:
            return True

    async def _order(self, record: JobRecord) -> JobRecord | None:
        """Send the order once; ``None`` when the estimate expired and must be re-quoted."""
        assert record.quote_id is not None
        assert record.estimate_id is not None
        request = record.job.order.to_request(record.estimate_id)
        try:
            record = await self._journal.begin_order(
                self._worker, record.key, quote_id=record.quote_id, estimate_id=record.estimate_id
            )
            self._observe(record)
        finally:
            self._gate.sending()
        try:
            order = await self._client.orders.create(request)
        except BadRequestError as exc:
            try:
                expired = await self._expired(record)
            except ShippingError:
                expired = False
            if expired:
                return None
            return await self._fail(record, Stage.ORDER, exc)
        except (OutcomeUnknownError, InternalServerError) as exc:
            return await self._finish(
                record.key,
                JobState.UNKNOWN,
                error=f"order outcome unknown, reconcile before retrying: {exc}",
                error_stage=Stage.ORDER.value,
                retryable=False,
            )
        except ShippingError as exc:  # refused or never sent: no order exists
            return await self._fail(record, Stage.ORDER, exc)
        finally:
            self._gate.poke()
        return await self._record(record.key, JobState.ORDERED, order_id=order.id)

    # -- waybill and pickup ----------------------------------------------------------------

    async def _waybill_stage(self, record: JobRecord) -> JobRecord:
        assert record.order_id is not None
        try:
            order = await self._client.orders.create_waybill(record.order_id)
        except OutcomeUnknownError as exc:
            # A 5xx or a lost answer: the order says whether the waybills were made.
            try:
                order = await self._client.orders.get(record.order_id)
            except ShippingError:
                return await self._fail(record, Stage.WAYBILL, exc)
            if not order.shipments or not all(order.waybills):
                return await self._finish(
                    record.key,
                    JobState.FAILED,
                    error=_describe(exc),
                    error_stage=Stage.WAYBILL.value,
                    retryable=True,  # no waybill was made: asking again is safe
                )
        except ShippingError as exc:
            return await self._fail(record, Stage.WAYBILL, exc)
        return await self._record(
            record.key,
            JobState.WAYBILLED,
            waybills=list(order.waybills),
            hub=record.hub or order.is_hub,
        )

    async def _pickup_stage(self, record: JobRecord) -> JobRecord:
        # On a hub order the availabilities and the booking apply to the first leg.
        assert record.order_id is not None
        wish = record.job.pickup or PickupWish()
        try:
            slots = await self._client.orders.pickup_availabilities(record.order_id)
            window = choose_pickup_window(slots, wish, now=self._clock.now())
            try:
                booked = await self._client.orders.schedule_pickup(record.order_id, window.request)
            except BadRequestError:
                # The cut-off may have passed between choosing and booking (or the
                # server's clock is ahead of ours): the next offered date, once.
                later = window.request.scheduled_date + timedelta(days=1)
                wish = msgspec.structs.replace(wish, earliest_date=later)
                window = choose_pickup_window(slots, wish, now=self._clock.now())
                booked = await self._client.orders.schedule_pickup(record.order_id, window.request)
        except ShippingError as exc:
            return await self._fail(record, Stage.PICKUP, exc)
        when: JobFields = {
            "pickup_date": window.request.scheduled_date,
            "pickup_from": window.request.time_from,
            "pickup_to": window.request.time_to,
        }
        if booked.rejected:
            when["error"] = f"the carrier rejected the pickup: {booked.error_message}"
            when["error_stage"] = Stage.PICKUP.value
            when["retryable"] = True
            return await self._finish(record.key, JobState.FAILED, **when)
        when["pickup_confirmation"] = (
            booked.confirmation_number or booked.freight_confirmation_number
        )
        return await self._finish(record.key, JobState.DONE, **when)

    async def _record(
        self, record_or_key: JobRecord | str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        key = record_or_key if isinstance(record_or_key, str) else record_or_key.key
        record = await self._journal.record(self._worker, key, state, **fields)
        self._observe(record)
        return record

    async def _finish(
        self, record_or_key: JobRecord | str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        key = record_or_key if isinstance(record_or_key, str) else record_or_key.key
        record = await self._journal.finish(self._worker, key, state, **fields)
        self._observe(record)
        return record

    async def _fail(self, record: JobRecord, stage: Stage, error: BaseException | str) -> JobRecord:
        retryable = isinstance(error, BaseException) and is_retryable(error)
        return await self._finish(
            record.key,
            JobState.FAILED,
            error=str(error) if isinstance(error, str) else _describe(error),
            error_stage=stage.value,
            retryable=retryable,
        )


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"


def _direct(request: QuoteRequest) -> QuoteRequest:
    return msgspec.structs.replace(request, hub_transit=False)


def _total(estimate: Estimate) -> Decimal | None:
    return estimate.total(estimate.currency) if estimate.currency else None
