"""The rules by which ``order_received`` evidence settles a create whose outcome is unknown.

Stated in :mod:`shipping_async.bulk.reconcile` (which re-exports these names), applied by
its :class:`~shipping_async.bulk.reconcile.Reconciler` to a journal's unknown jobs and by
:class:`~shipping_async.ledger.LedgerReconciler` to an order ledger's unresolved
references: one set of rules, whatever holds the unknowns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import Protocol, TypedDict

import msgspec

from shipping_async.bulk.evidence import EvidenceStore, OrderEvidence, order_received_ids
from shipping_async.clock import Clock, SystemClock
from shipping_async.errors import NotFoundError, ShippingError
from shipping_async.models.orders import Order
from shipping_async.models.webhooks import WebhookEvent

__all__ = [
    "CLOCK_SKEW",
    "DELIVERY_TIMEOUT",
    "RETRY_DELAYS",
    "SILENCE_HORIZON",
    "SILENCE_MARGIN",
    "EvidenceRules",
    "OrderReader",
    "ReconcileReport",
    "Remaining",
    "Settled",
    "UnknownOrder",
]

_log = logging.getLogger("shipping_async.bulk.reconcile")

#: Seconds (API clock) after a failed delivery at which the API retries it (section 6).
RETRY_DELAYS = (20.0, 40.0, 60.0, 80.0)
#: How long the API waits for a receiver's answer: not shown by the spec; assumed.
DELIVERY_TIMEOUT = 30.0
#: Slack on top of the retry schedule (the spec says "about").
SILENCE_MARGIN = 30.0
#: API-clock seconds after an order intent by which its ``order_received`` event must have
#: arrived at a receiver that answers: five attempts with their timeouts, the four
#: retry delays, and the margin (380 s).
SILENCE_HORIZON = sum(RETRY_DELAYS) + (len(RETRY_DELAYS) + 1) * DELIVERY_TIMEOUT + SILENCE_MARGIN
#: Real seconds an event may seem to precede the intent (clocks of hosts and database).
CLOCK_SKEW = 5.0
_CACHE_LIMIT = 100_000  # references of orders read, kept across passes


class _Orders(Protocol):
    async def get(self, order_id: int, /) -> Order: ...


class OrderReader(Protocol):
    """What the reconciler needs of a client: ``GET /orders/{id}``."""

    @property
    def orders(self) -> _Orders: ...


class Settled(msgspec.Struct, frozen=True, kw_only=True):
    """A job settled by this pass: ``order_id`` found, or ``None`` when re-sent."""

    key: str
    order_id: int | None
    evidence: str


class Remaining(msgspec.Struct, frozen=True, kw_only=True):
    """A job left ``UNKNOWN``, and why: ``waiting`` for evidence within its horizon, or
    ``silent`` (silence proven, not acted on), or neither (ambiguous: a person decides)."""

    key: str
    reason: str
    silent: bool = False
    waiting: bool = False


class ReconcileReport(msgspec.Struct, kw_only=True):
    """What one pass of the reconciler did."""

    settled: list[Settled] = msgspec.field(default_factory=list)
    resent: list[Settled] = msgspec.field(default_factory=list)
    remaining: list[Remaining] = msgspec.field(default_factory=list)


class UnknownOrder(msgspec.Struct, frozen=True, kw_only=True):
    """What the rules need of one create whose outcome is unknown.

    Its request left between ``sent_from`` and ``sent_by`` (store clock): a journal's
    order intent is both; an order ledger knows the claim and when the answer was given
    up on. Candidates are read from ``sent_from - skew`` on, however late they came;
    the horizon (and silence) counts from ``sent_by``. ``sent_by=None``: when (or
    whether) the request left is not known (a create still claimed, whose process may
    have stopped): evidence may settle it, silence never proves anything of it (the
    horizon then counts from ``sent_from``).
    """

    key: str
    customer_reference: str
    sent_from: datetime
    sent_by: datetime | None
    account: str = ""
    quote_id: int | None = None


class RulesOptions(TypedDict, total=False):
    """The keyword options of :class:`EvidenceRules`, for a subclass that passes them on."""

    clock: Clock | None
    horizon: float
    skew: float
    resend_after_silence: bool
    webhook_active: Callable[[], Awaitable[bool]] | None
    client_for: Callable[[str], OrderReader] | None


class EvidenceRules:
    """The rules of the module docstring, for any store of unknown creates and evidence.

    A subclass lists its unknowns (:meth:`_judge_all`) and says how a match settles one
    (``_settle_found``) and how proven silence frees one (``_settle_silent``).
    ``horizon`` is in API-clock seconds (converted to real seconds with ``clock``, like
    every protocol duration); ``skew`` in real seconds. ``webhook_active``, when given,
    is asked before silence counts (a ``failing`` webhook proves nothing).
    """

    def __init__(
        self,
        evidence: EvidenceStore,
        client: OrderReader,
        *,
        clock: Clock | None = None,
        horizon: float = SILENCE_HORIZON,
        skew: float = CLOCK_SKEW,
        resend_after_silence: bool = False,
        webhook_active: Callable[[], Awaitable[bool]] | None = None,
        client_for: Callable[[str], OrderReader] | None = None,
    ) -> None:
        if horizon <= 0 or skew < 0:
            raise ValueError("horizon: must be > 0; skew: must be >= 0")
        self.evidence = evidence
        self.client = client
        self.client_for = client_for
        clock = clock or SystemClock()
        self.horizon_real = timedelta(seconds=horizon / clock.from_real(1.0))
        self._speed = clock.from_real(1.0)
        self.skew = timedelta(seconds=skew)
        self.resend_after_silence = resend_after_silence
        self.webhook_active = webhook_active
        self._references: dict[int, tuple[str | None, int | None]] = {}
        # Passes started and finished, for :meth:`settle_soon` (one pass at a time).
        self._started = 0
        self._finished = 0
        self._passed = asyncio.Condition()
        self._wanted = asyncio.Event()
        self._looping = False

    async def record(self, events: Iterable[WebhookEvent]) -> int:
        """Record the ``order_received`` events among ``events``; returns how many were new.

        A receiver's handler: durable on return, so answer 200 only after it.
        """
        return await self.evidence.record_order_received(order_received_ids(events))

    async def run_once(self) -> ReconcileReport:
        """One pass over every unknown order of the store."""
        raise NotImplementedError

    async def run_forever(self, stop: asyncio.Event, *, every: float, most: float = 30.0) -> None:
        """Reconcile every ``every`` real seconds until ``stop`` is set; errors are logged.

        While passes change nothing and no job waits for evidence (only jobs a person must
        decide, or none), the pause doubles up to ``most`` seconds: each pass reads every
        job's reference, which a large journal should not pay twice a second. A
        :meth:`settle_soon` cuts the pause short.
        """
        self._looping = True
        try:
            await self._loop(stop, every=every, most=most)
        finally:
            self._looping = False
            async with self._passed:
                self._passed.notify_all()

    async def _loop(self, stop: asyncio.Event, *, every: float, most: float) -> None:
        pause = every
        while not stop.is_set():
            self._wanted.clear()
            self._started += 1
            try:
                report = await self.run_once()
            except (ShippingError, OSError) as exc:
                _log.warning("reconciling unknown orders failed (tried again): %s", exc)
                pause = every
            else:
                for settled in report.settled:
                    _log.info("%s settled from evidence: %s", settled.key, settled.evidence)
                busy = report.settled or report.resent or any(r.waiting for r in report.remaining)
                pause = every if busy else min(pause * 2, max(most, every))
            finally:
                self._finished = self._started
                async with self._passed:
                    self._passed.notify_all()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await _first(stop.wait(), self._wanted.wait())

    async def settle_soon(self, *, within: float) -> bool:
        """Ask :meth:`run_forever` for a pass now and wait (at most ``within`` real
        seconds) until one that started after this call has finished; whether it did.

        Passes never overlap: callers meanwhile share the next one. Without a
        :meth:`run_forever` running, it returns ``False`` at once.
        """
        target = self._started + 1
        self._wanted.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within), self._passed:
                await self._passed.wait_for(lambda: self._finished >= target or not self._looping)
        return self._finished >= target

    # -- the rules ---------------------------------------------------------------------------

    async def _judge_all(
        self, unknowns: Iterable[UnknownOrder | Remaining], report: ReconcileReport
    ) -> ReconcileReport:
        """Settle what the evidence proves of each; ``Remaining`` items pass through."""
        now = await self.evidence.evidence_now()
        active: bool | None = None
        for unknown in unknowns:
            if isinstance(unknown, Remaining):
                report.remaining.append(unknown)
                continue
            outcome = await self._judge(unknown, now)
            if isinstance(outcome, OrderEvidence):
                found = await self._settle_found(unknown, outcome)
                if isinstance(found, Settled):
                    report.settled.append(found)
                else:
                    report.remaining.append(found)
                continue
            if outcome.silent:
                if active is None:
                    active = await self._webhook_active()
                if not active:
                    outcome = Remaining(
                        key=unknown.key,
                        reason=outcome.reason + "; but the webhook is not active: no proof",
                    )
                elif self.resend_after_silence:
                    resent = await self._settle_silent(unknown, outcome.reason)
                    if resent is not None:
                        report.resent.append(resent)
                    continue
            report.remaining.append(outcome)
        return report

    async def _settle_found(
        self, unknown: UnknownOrder, event: OrderEvidence
    ) -> Settled | Remaining:
        raise NotImplementedError

    async def _settle_silent(self, unknown: UnknownOrder, reason: str) -> Settled | None:
        raise NotImplementedError

    async def _judge(self, unknown: UnknownOrder, now: datetime) -> OrderEvidence | Remaining:
        """The one matching order, or why there is none (``silent``: proven silence)."""
        sent_by = unknown.sent_from if unknown.sent_by is None else unknown.sent_by
        until = sent_by + self.horizon_real
        # Candidates are every event recorded since the request may have left, however
        # late: the horizon bounds how long silence must last, never which evidence
        # counts. An event recorded after it (the receiver's store was away, the API's
        # last retry ran late) still proves that the order exists, and re-sending it
        # would create it twice.
        events = await self.evidence.order_received(since=unknown.sent_from - self.skew)
        candidates = [e for e in events if e.owner is None or e.owner == unknown.key]
        matches: list[OrderEvidence] = []
        unread: list[str] = []
        for event in candidates:
            try:
                found = await self._reference_of(event.order_id, unknown.account)
            except ShippingError as exc:
                unread.append(f"order {event.order_id}: {type(exc).__name__}")
                continue
            if found is not None and self._matches(unknown, *found):
                matches.append(event)
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            ids = ", ".join(str(match.order_id) for match in matches)
            reason = f"{len(matches)} orders match customer_reference and quote: {ids}"
            return Remaining(key=unknown.key, reason=reason)
        if unread:
            reason = "could not read " + "; ".join(unread[:5])
            return Remaining(key=unknown.key, reason=reason, waiting=now < until)
        waited = now - sent_by
        if now < until:
            return Remaining(
                key=unknown.key,
                waiting=True,
                reason=f"no matching order_received event yet ({len(candidates)} "
                f"candidate(s) read), {self._api_seconds(waited):.0f} of "
                f"{self._api_seconds(self.horizon_real):.0f} s waited",
            )
        arrived = await self.evidence.order_received(since=sent_by, until=now)
        reason = (
            f"no order_received event in {self._api_seconds(waited):.0f} s while "
            f"{len(arrived)} other events arrived"
        )
        if unknown.sent_by is None:
            reason += "; but when its request left is not known: no proof"
        return Remaining(
            key=unknown.key, reason=reason, silent=bool(arrived) and unknown.sent_by is not None
        )

    @staticmethod
    def _matches(unknown: UnknownOrder, reference: str | None, quote_id: int | None) -> bool:
        if reference != unknown.customer_reference:
            return False
        return unknown.quote_id is None or quote_id is None or quote_id == unknown.quote_id

    async def _reference_of(
        self, order_id: int, account: str
    ) -> tuple[str | None, int | None] | None:
        """The order's (customer_reference, quote_id), read once; ``None`` if it is gone
        (or another account's: each account sees only its own orders)."""
        known = self._references.get(order_id)
        if known is not None:
            return known
        client = self.client_for(account) if self.client_for is not None else self.client
        try:
            order = await client.orders.get(order_id)
        except NotFoundError:
            return None
        if len(self._references) >= _CACHE_LIMIT:
            self._references.clear()
        found = (order.customer_reference, order.quote_id)
        self._references[order_id] = found
        return found

    async def _webhook_active(self) -> bool:
        if self.webhook_active is None:
            return True  # the caller vouches for its receiver (documented)
        try:
            return await self.webhook_active()
        except ShippingError as exc:
            _log.warning("cannot read the webhook's status: %s", exc)
            return False

    def _api_seconds(self, real: timedelta) -> float:
        return real.total_seconds() * self._speed


async def _first(*waits: Awaitable[object]) -> None:
    """Wait until the first of ``waits`` is done; cancel the others."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
