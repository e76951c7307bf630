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
4. ``orders.create``: when its permit is granted (the limiter not paused), the intent is
   written (``begin_order``, durable, fenced by the claim token, with the facts of a
   quote made just before: a quote has no write of its own when its order follows) and
   the request leaves at once. A 429 or a connection that never opened withdraws the
   intent (the job is ``QUOTED``) before the client waits to re-send (see
   :data:`shipping_async._retry.order_intent`); a run that stops between a quote and
   its order records the quote.
5. 201: ``ORDERED``. A 400 whose estimate turns out expired: quote again. Any other
   refusal: ``FAILED`` (nothing was created; the intent is gone). No answer, or a 5xx
   (the server may have created the order before failing): ``UNKNOWN``, never re-sent
   without reconciling.

Every write names the job's claim token: when the claim went stale the journal refuses
it with :class:`~shipping_async.bulk.journal.LeaseLostError`, which :meth:`JobPipeline.ship`
lets through for the runner to stop the task quietly. Before a waybill or a pickup is
requested the lease is renewed (taken back if it lapsed and nobody claimed the job): a
stale task requests nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Protocol, Unpack

import msgspec

from shipping_async._retry import order_intent
from shipping_async.bulk._gate import GateClosedError, OrderGate
from shipping_async.bulk._outage import IntentUnsettled
from shipping_async.bulk._pickup import book_pickup
from shipping_async.bulk._places import Places
from shipping_async.bulk.choice import EstimateChooser
from shipping_async.bulk.journal import (
    JobFields,
    JobRecord,
    JobState,
    Journal,
    JournalError,
    JournalStateError,
    LeaseLostError,
)
from shipping_async.bulk.results import Stage
from shipping_async.clock import Clock
from shipping_async.errors import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    BadRequestError,
    EstimateExpiredError,
    InternalServerError,
    NoHubForRouteError,
    NoPickupWindowError,
    OutcomeUnknownError,
    RateLimitError,
    ShippingError,
)
from shipping_async.limiter import OrderLimiter
from shipping_async.models import (
    Order,
    OrderRequest,
    PickupAvailability,
    PickupWish,
    Quote,
    QuoteRequest,
    ScheduledPickup,
    SchedulePickupRequest,
)
from shipping_async.telemetry._scope import job_stage

__all__ = ["QUOTE_FRESHNESS", "JobPipeline", "ShippingClient", "Stopped", "is_retryable"]

_log = logging.getLogger("shipping_async.bulk.pipeline")

#: Seconds (of the API's clock) a quote made by this run is trusted without asking the
#: server whether its estimates expired. The spec does not say how long an estimate stays
#: valid; the sandbox keeps them 900 s, and an order refused for an expired estimate is
#: quoted again, never lost - so half a rate window costs at most one refused request.
QUOTE_FRESHNESS = 30.0

# Looked up once: an enum member's ``.value`` is a property call, at every stage of every job.
_PENDING, _QUOTED, _ORDERED, _WAYBILLED = (
    JobState.PENDING,
    JobState.QUOTED,
    JobState.ORDERED,
    JobState.WAYBILLED,
)
_ORDER_STAGE, _WAYBILL_STAGE, _PICKUP_STAGE = (
    Stage.ORDER.value,
    Stage.WAYBILL.value,
    Stage.PICKUP.value,
)


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


class LeaseView(Protocol):
    """What the pipeline asks of the runner's leases (see ``bulk._leases.Claims``)."""

    def surely_live(self, key: str) -> bool: ...
    def renewed(self, key: str, *, asked_at: float) -> None: ...


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
    """Runs jobs through their stages; one instance serves every job of a run.

    Each :meth:`ship` works under the claim its record carries (its
    :attr:`~shipping_async.bulk.journal.JobRecord.claim_token`); ``lease`` is the
    lease length a renewal asks for before a waybill or a pickup is requested.
    """

    def __init__(
        self,
        client: ShippingClient,
        journal: Journal,
        *,
        choose: EstimateChooser,
        gate: OrderGate,
        quote_ahead: int,
        lease: float,
        estimate_validity: float | None = None,
        max_requotes: int = 3,
        observe: Callable[[JobRecord], None] | None = None,
        work_places: Places | None = None,
        leases: LeaseView | None = None,
    ) -> None:
        self._client = client
        # Shared by every pipeline of a run: jobs doing requests at once, across accounts.
        self._work_places = work_places
        self._journal = journal
        self._choose = choose
        self._gate = gate
        self._quote_places = Places(quote_ahead)
        self._lease = lease
        self._leases = leases
        self._validity = estimate_validity
        self._max_requotes = max_requotes
        self._clock = client.clock
        self._observe: Callable[[JobRecord], None] = observe or (lambda record: None)

    async def ship(self, record: JobRecord) -> JobRecord:
        """Take a claimed job from its current state to a finished one.

        Raises :class:`Stopped` when the run stops before the job's order was started,
        and :class:`LeaseLostError` when the job's claim went stale (another task, or a
        later claim, owns it): the caller stops working on it.
        """
        if record.claim_token is None:
            raise ValueError(f"job {record.key!r} is not claimed: ship() needs a claimed record")
        job = _Claim(self, record.key, record.claim_token)
        # Each stage is a span (with OpenTelemetry) and the job of its log lines.
        key, account = record.key, record.job.account
        # Without a bound on the jobs doing requests there is no place to take.
        bounded = self._work_places is not None
        try:
            state = record.state
            if state is _PENDING or state is _QUOTED:
                with job_stage(_ORDER_STAGE, key, account):
                    record = await self._order_stage(job, record)
                state = record.state
            if state is _ORDERED:
                if bounded:
                    await job.take_place()
                with job_stage(_WAYBILL_STAGE, key, account):
                    record = await self._waybill_stage(job, record)
                state = record.state
            if state is _WAYBILLED:
                if bounded:
                    await job.take_place()
                with job_stage(_PICKUP_STAGE, key, account):
                    record = await self._pickup_stage(job, record)
        finally:
            if bounded:
                job.leave_place()
        return record

    # -- quote and order -------------------------------------------------------------------

    async def _order_stage(self, job: _Claim, record: JobRecord) -> JobRecord:
        await self._quote_places.take()
        holding = True
        try:
            if self._gate.closed:
                raise Stopped
            quoted_at: float | None = None  # monotonic; None: quoted by an earlier run
            expired = 0  # estimates that expired before their order
            while expired <= self._max_requotes:
                # The turn to order first, then the quote: an estimate is made only when
                # its order can be sent right after, so none expires waiting for a slot.
                try:
                    await self._gate.admit()
                except GateClosedError:
                    raise Stopped from None
                try:
                    if not await job.take_place(unless_stopped=True):
                        raise Stopped
                    if record.state is JobState.PENDING:
                        stage = "requote" if expired else Stage.QUOTE.value  # it expired
                        # The estimate's age counts from the request: the server made it
                        # at some moment after that, however late the answer came.
                        asked_at = self._clock.monotonic()
                        with job_stage(stage, record.key, record.job.account):
                            record = await self._quote(job, record)
                        if record.state is not JobState.QUOTED:
                            self._gate.sending()  # not sending after all: give the turn back
                            return record
                        quoted_at = asked_at
                    if holding:  # quoted and admitted: the next job may go ahead
                        self._quote_places.give()
                        holding = False
                    fresh = await self._still_valid(record, quoted_at)
                    if self._gate.closed:  # stopped while quoting: no new order starts
                        await job.keep_quote()
                        raise Stopped
                except ShippingError as exc:
                    self._gate.sending()  # not sending after all: give the turn back
                    return await job.fail(Stage.ORDER, exc)
                except BaseException:
                    self._gate.sending()
                    raise
                if not fresh:
                    self._gate.sending()
                    record = await job.requote(record)
                    expired += 1
                    continue
                try:
                    outcome = await self._order(job, record)
                except IntentUnsettled:
                    # The journal store went away while the intent was written; nothing
                    # was sent. Once it answers: take back an intent that committed, and
                    # queue for the order again (its lease is checked on the way).
                    record = await job.settle_intent()
                    continue
                if outcome is not None:
                    return outcome
                record = await job.requote(record)
                expired += 1
            return await job.fail(
                Stage.ORDER, f"the estimate expired {self._max_requotes + 1} times"
            )
        finally:
            if holding:
                self._quote_places.give()

    async def _quote(self, job: _Claim, record: JobRecord) -> JobRecord:
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
            return await job.fail(Stage.QUOTE, exc)
        currency = estimate.currency  # a set of the line items' currencies: asked once
        return job.quoted(
            record,
            {
                "quote_id": quote.id,
                "estimate_id": estimate.estimate_id,
                "carrier": estimate.shipping_company,
                "service": estimate.shipping_service,
                "cost": estimate.total(currency) if currency else None,
                "currency": currency,
                "hub": quote.hub_transit or request.hub_transit,
            },
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

    async def _order(self, job: _Claim, record: JobRecord) -> JobRecord | None:
        """Send the order once; ``None`` when the estimate expired and must be re-quoted."""
        assert record.quote_id is not None
        assert record.estimate_id is not None
        request = record.job.order.to_request(record.estimate_id)
        intent = _Intent(job, quote_id=record.quote_id, estimate_id=record.estimate_id)
        context = order_intent.set(intent)
        self._gate.sending()  # the client takes the permit itself, at once
        try:
            order = await self._client.orders.create(request)
        except EstimateExpiredError:
            # The client re-checked the estimate after a long wait for its permit and sent
            # nothing: quote again, as for a 400 on an expired estimate.
            await intent.withdraw()
            return None
        except BadRequestError as exc:
            await intent.withdraw()  # refused: nothing was created
            try:
                expired = await self._expired(record)
            except ShippingError:
                expired = False
            if expired:
                return None
            return await job.fail(Stage.ORDER, exc)
        except (OutcomeUnknownError, InternalServerError) as exc:
            return await job.finish(
                JobState.UNKNOWN,
                error=f"order outcome unknown, reconcile before retrying: {exc}",
                error_stage=Stage.ORDER.value,
                retryable=False,
            )
        except ShippingError as exc:  # refused or never sent: no order exists
            return await job.fail(Stage.ORDER, exc)
        finally:
            order_intent.reset(context)
            self._gate.poke()
        return await job.ordered(order.id)

    # -- waybill and pickup ----------------------------------------------------------------

    async def _waybill_stage(self, job: _Claim, record: JobRecord) -> JobRecord:
        assert record.order_id is not None
        await job.hold()  # a stale task must not request the waybill
        try:
            order = await self._client.orders.create_waybill(record.order_id)
        except OutcomeUnknownError as exc:
            # A 5xx or a lost answer: the order says whether the waybills were made.
            try:
                order = await self._client.orders.get(record.order_id)
            except ShippingError:
                return await job.fail(Stage.WAYBILL, exc)
            if not order.shipments or not all(order.waybills):
                return await job.finish(
                    JobState.FAILED,
                    error=_describe(exc),
                    error_stage=Stage.WAYBILL.value,
                    retryable=True,  # no waybill was made: asking again is safe
                )
        except ShippingError as exc:
            return await job.fail(Stage.WAYBILL, exc)
        return await job.record(
            JobState.WAYBILLED,
            waybills=list(order.waybills),
            hub=record.hub or order.is_hub,
        )

    async def _pickup_stage(self, job: _Claim, record: JobRecord) -> JobRecord:
        # On a hub order the availabilities and the booking apply to the first leg.
        assert record.order_id is not None
        wish = record.job.pickup or PickupWish()
        try:
            # A stale task must not book a second pickup: ``hold`` before each booking.
            window, booked = await book_pickup(
                self._client.orders, record.order_id, wish, self._clock, job.hold
            )
        except ShippingError as exc:
            return await job.fail(Stage.PICKUP, exc)
        when: JobFields = {
            "pickup_date": window.request.scheduled_date,
            "pickup_from": window.request.time_from,
            "pickup_to": window.request.time_to,
        }
        if booked.rejected:
            when["error"] = f"the carrier rejected the pickup: {booked.error_message}"
            when["error_stage"] = Stage.PICKUP.value
            when["retryable"] = True
            return await job.finish(JobState.FAILED, **when)
        when["pickup_confirmation"] = (
            booked.confirmation_number or booked.freight_confirmation_number
        )
        return await job.finish(JobState.DONE, **when)


class _Claim:
    """One job under one claim: every write names its token."""

    __slots__ = ("key", "pipeline", "placed", "quote", "token")

    def __init__(self, pipeline: JobPipeline, key: str, token: str) -> None:
        self.pipeline = pipeline
        self.key = key
        self.token = token
        self.placed = False  # holds one of the run's work places
        #: The facts of a quote made by this claim and not recorded yet: the order's
        #: intent records them (no write of their own when the order follows at once).
        self.quote: JobFields | None = None

    async def take_place(self, *, unless_stopped: bool = False) -> bool:
        """Hold one of the run's work places from now to the end of the job (once);
        ``False`` if ``unless_stopped`` and the run stopped first (a free place is taken
        at once either way: no race with the stop)."""
        places = self.pipeline._work_places
        if places is None or self.placed:
            return True
        if not await places.take(unless_stopped=unless_stopped):
            return False
        self.placed = True
        return True

    def leave_place(self) -> None:
        places = self.pipeline._work_places
        if places is not None and self.placed:
            self.placed = False
            places.give()

    async def record(self, state: JobState, **fields: Unpack[JobFields]) -> JobRecord:
        record = await self.pipeline._journal.record(self.token, self.key, state, **fields)
        self.pipeline._observe(record)
        return record

    async def finish(self, state: JobState, **fields: Unpack[JobFields]) -> JobRecord:
        if self.quote is not None:  # a quote not recorded: the result keeps it
            fields = {**self.quote, **fields}
            self.quote = None
        record = await self.pipeline._journal.finish(self.token, self.key, state, **fields)
        self.pipeline._observe(record)
        return record

    def quoted(self, record: JobRecord, quote: JobFields) -> JobRecord:
        """``record`` quoted with ``quote``, not written: the order's intent writes it
        (:meth:`keep_quote` when the order is not sent)."""
        self.quote = quote
        return msgspec.structs.replace(record, state=JobState.QUOTED, **quote)

    async def keep_quote(self) -> None:
        """Record the quote not written yet (the run stops before its order): a later run
        checks its estimate instead of quoting again."""
        if self.quote is not None:
            quote, self.quote = self.quote, None
            await self.record(JobState.QUOTED, **quote)

    async def requote(self, record: JobRecord) -> JobRecord:
        """The estimate of ``record`` expired: the job is ``PENDING`` again, to be quoted
        again (a write only when its quote was recorded)."""
        if self.quote is not None:  # the journal still holds the job pending
            self.quote = None
            return msgspec.structs.replace(record, state=JobState.PENDING)
        return await self.record(JobState.PENDING)

    async def fail(self, stage: Stage, error: BaseException | str) -> JobRecord:
        retryable = isinstance(error, BaseException) and is_retryable(error)
        return await self.finish(
            JobState.FAILED,
            error=str(error) if isinstance(error, str) else _describe(error),
            error_stage=stage.value,
            retryable=retryable,
        )

    async def hold(self) -> None:
        """Renew the lease before a request a stale task must not make (takes a lapsed
        one back when nobody claimed the job since); :class:`LeaseLostError` otherwise."""
        pipeline = self.pipeline
        leases = pipeline._leases
        if leases is not None and leases.surely_live(self.key):
            return  # nobody else can have claimed it: no round trip needed
        asked_at = pipeline._clock.monotonic()
        held = await pipeline._journal.renew({self.key: self.token}, lease=pipeline._lease)
        if self.key not in held:
            raise LeaseLostError(f"job {self.key!r}: the job was claimed again; left to that claim")
        if leases is not None:
            leases.renewed(self.key, asked_at=asked_at)

    async def settle_intent(self) -> JobRecord:
        """After :class:`IntentUnsettled` (nothing sent): read the row once the store
        answers; an intent that committed is taken back, so the job is ``QUOTED`` again.
        :class:`LeaseLostError` when the job was claimed again meanwhile."""
        journal = self.pipeline._journal
        self.quote = None  # recorded with the intent, or quoted again from pending
        current = await journal.get(self.key)
        if current is None or current.claim_token != self.token:
            raise LeaseLostError(f"job {self.key!r}: claimed again during the store's outage")
        if current.state is JobState.ORDERING:
            current = await journal.withdraw_order(self.token, self.key)
        self.pipeline._observe(current)
        return current

    async def ordered(self, order_id: int) -> JobRecord:
        """Record the created order; if a lease race took the job meanwhile, say so truly.

        When the lease lapsed while the request was on the wire, a claim may have found
        the job in ``ORDERING`` and made it ``UNKNOWN``: the order is known here, so it is
        reconciled with its id (and continues from ``ORDERED`` under a later claim)
        rather than left for a person to look up.
        """
        try:
            return await self.record(JobState.ORDERED, order_id=order_id)
        except (JournalError, asyncio.CancelledError) as exc:
            if not isinstance(exc, LeaseLostError):  # the journal failed: say what exists
                _log.error(
                    "job %s: order %d was created but could not be recorded; reconcile the "
                    "job with that order id",
                    self.key,
                    order_id,
                )
                raise
            journal = self.pipeline._journal
            current = await journal.get(self.key)
            if current is not None and current.state is JobState.UNKNOWN:
                try:
                    settled = await journal.reconcile(self.key, order_id=order_id)
                except JournalStateError:
                    current = await journal.get(self.key)  # settled by someone else meanwhile
                else:
                    self.pipeline._observe(settled)
                    raise
            if current is None or current.order_id != order_id:
                # The job went on without this order (re-sent, or settled with another
                # id): this one exists at the API, so a person must be told which it is.
                _log.error(
                    "job %s: order %d was created, but the journal now holds %s; "
                    "cancel one of them if both exist",
                    self.key,
                    order_id,
                    "nothing"
                    if current is None
                    else f"state {current.state.value} with order {current.order_id}",
                )
            raise


class _Intent:
    """The order intent of one send: written right before the request, withdrawn on proof."""

    __slots__ = ("_estimate_id", "_job", "_quote_id", "_recorded")

    def __init__(self, job: _Claim, *, quote_id: int, estimate_id: int) -> None:
        self._job = job
        self._quote_id = quote_id
        self._estimate_id = estimate_id
        self._recorded = False

    async def granted(self) -> None:
        pipeline, job = self._job.pipeline, self._job
        journal = pipeline._journal
        begin = functools.partial(
            journal.begin_order,
            job.token,
            job.key,
            quote_id=self._quote_id,
            estimate_id=self._estimate_id,
            quote=job.quote,  # a quote not recorded yet goes with the intent
        )
        try:
            record = await begin()
        except LeaseLostError:
            # The lease may only have lapsed (a slow journal): take it back if nobody
            # claimed the job since, else this raises and nothing is sent.
            await job.hold()
            record = await begin()
        job.quote = None
        self._recorded = True
        pipeline._observe(record)

    def sending(self) -> None:
        self._job.pipeline._journal.sending(self._job.key)

    async def withdrawn(self) -> None:
        await self.withdraw()

    async def withdraw(self) -> None:
        """Take the intent back, if it is recorded (a no-op otherwise)."""
        if self._recorded:
            record = await self._job.pipeline._journal.withdraw_order(
                self._job.token, self._job.key
            )
            self._recorded = False
            self._job.pipeline._observe(record)


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"


def _direct(request: QuoteRequest) -> QuoteRequest:
    return msgspec.structs.replace(request, hub_transit=False)
