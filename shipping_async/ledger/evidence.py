"""The order ledger settles itself from webhook evidence, by the reconciler's rules.

A reference the ledger holds unresolved (a create whose answer was lost, or whose
process stopped mid-request) makes every later create of it raise
``OrderOutcomeUnknownError``. Every new order fires ``order_received`` with its id, and
``GET /orders/{id}`` says its ``customer_reference``: the ledger's store records those
events (:class:`~shipping_async.bulk.evidence.EvidenceStore`), and
:class:`LedgerReconciler` applies the rules of :mod:`shipping_async.bulk.reconcile` to
each unresolved reference, as they apply to a journal's unknown jobs:

- **one matching order**: the reference is resolved to it (``orders.resolve``: fetched,
  checked, its answer kept); the next create returns it without sending;
- **silence** (no match within the API's whole retry horizon after the create gave up
  on its answer, while other orders' events arrived, and the webhook ``active`` when
  the caller says which it is): reported; only with ``resend_after_silence=True`` is
  the reference freed, so that the next create sends;
- a reference still ``sending`` is judged once it has been claimed for a horizon (a
  live create is still waiting for its answer before that): evidence can settle it,
  silence never (when its request left is not known).

:func:`settle_from_webhooks` wires it into a web app in one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING

from shipping_async.bulk.evidence import OrderEvidence
from shipping_async.bulk.reconcile import (
    CLOCK_SKEW,
    SILENCE_HORIZON,
    EvidenceRules,
    ReconcileReport,
    Remaining,
    Settled,
    UnknownOrder,
)
from shipping_async.errors import ConfigurationError, RequestValidationError, ShippingError
from shipping_async.ledger._base import EvidenceLedger, LedgerEntry
from shipping_async.models.webhooks import WebhookEvent, WebhookStatus

if TYPE_CHECKING:
    from shipping_async._client import AsyncShippingClient
    from shipping_async.webhooks import WebhookReceiver

__all__ = ["LedgerReconciler", "settle_from_webhooks"]

_log = logging.getLogger("shipping_async.ledger")

#: Real seconds a delivery waits for the pass that settles from its evidence.
SETTLE_WAIT = 2.0


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


class LedgerReconciler(EvidenceRules):
    """Settles the references ``client.order_ledger`` holds unresolved, from the
    ``order_received`` evidence recorded in the ledger's own store.

    ::

        settler = LedgerReconciler(client)
        await settler.record(events)        # a receiver's step, before it answers 200
        report = await settler.run_once()   # report.settled, .resent (freed), .remaining

    The options are the reconciler's (:class:`~shipping_async.bulk.reconcile.EvidenceRules`);
    ``clock`` defaults to the client's. Keys in the report are customer references.
    """

    def __init__(
        self,
        client: AsyncShippingClient,
        *,
        horizon: float = SILENCE_HORIZON,
        skew: float = CLOCK_SKEW,
        resend_after_silence: bool = False,
        webhook_id: int | None = None,
    ) -> None:
        ledger = client.order_ledger
        if ledger is None:
            raise ConfigurationError("settling from evidence needs a client with an order_ledger")
        if not isinstance(ledger, EvidenceLedger):
            raise ConfigurationError(
                f"{type(ledger).__name__} keeps no order_received evidence: use "
                "SQLiteOrderLedger or PostgresOrderLedger"
            )

        async def active() -> bool:
            assert webhook_id is not None
            webhook = await client.webhooks.get(webhook_id)
            return bool(webhook.status == WebhookStatus.ACTIVE)

        super().__init__(
            ledger,
            client,
            clock=client.clock,
            horizon=horizon,
            skew=skew,
            resend_after_silence=resend_after_silence,
            webhook_active=active if webhook_id is not None else None,
        )
        self.ledger: EvidenceLedger = ledger
        # The stamp of each unknown entry as judged: silence frees that entry, no later one.
        self._judged: dict[str, str] = {}
        self._client = client

    async def run_once(self) -> ReconcileReport:
        """One pass over every reference the ledger holds unresolved."""
        report = ReconcileReport()
        entries = await self.ledger.unresolved()
        self._judged.clear()
        if not entries:
            return report
        now = await self.evidence.evidence_now()
        return await self._judge_all([self._unknown(entry, now) for entry in entries], report)

    def _unknown(self, entry: LedgerEntry, now: datetime) -> UnknownOrder | Remaining:
        reference = entry.customer_reference
        claimed = _at(entry.claimed_at or entry.updated_at)
        if entry.state == "unknown":
            # Sent after the claim, given up on when the state changed.
            sent_by: datetime | None = _at(entry.updated_at)
            self._judged[reference] = entry.updated_at
        elif now - claimed >= self.horizon_real:
            sent_by = None  # still "sending" long after its claim: its process stopped?
        else:
            return Remaining(key=reference, reason="a create of it is in flight")
        return UnknownOrder(
            key=reference, customer_reference=reference, sent_from=claimed, sent_by=sent_by
        )

    async def _settle_found(
        self, unknown: UnknownOrder, event: OrderEvidence
    ) -> Settled | Remaining:
        reference = unknown.customer_reference
        try:
            await self._client.orders.resolve(reference, order_id=event.order_id)
        except RequestValidationError as exc:  # its reference changed since it was read
            return Remaining(key=reference, reason=str(exc))
        evidence = (
            f"resolved from evidence: order_received for order {event.order_id} at "
            f"{event.received_at.isoformat(timespec='seconds')}, customer_reference matched"
        )
        _log.info("order ledger: customer_reference %r %s", reference, evidence)
        return Settled(key=reference, order_id=event.order_id, evidence=evidence)

    async def _settle_silent(self, unknown: UnknownOrder, reason: str) -> Settled | None:
        reference = unknown.customer_reference
        judged = self._judged.pop(reference, None)
        # Only the entry judged: another process may have freed it and a create claimed
        # it again since, whose claim must stand.
        if judged is None or not await self.ledger.free_unknown(reference, updated_at=judged):
            return None
        evidence = f"freed after silence (the next create sends): {reason}"
        _log.warning("order ledger: customer_reference %r %s", reference, evidence)
        return Settled(key=reference, order_id=None, evidence=evidence)


@asynccontextmanager
async def settle_from_webhooks(
    client: AsyncShippingClient,
    receiver: WebhookReceiver,
    *,
    webhook_id: int | None = None,
    resend_after_silence: bool = False,
    every: float = 1.0,
    settle_wait: float = SETTLE_WAIT,
) -> AsyncIterator[LedgerReconciler]:
    """The one call that makes ``client.order_ledger`` settle itself from ``receiver``.

    ::

        receiver = WebhookReceiver(on_event, token=webhook.token, legs=legs_from(client))
        async with settle_from_webhooks(client, receiver, webhook_id=webhook.id):
            ...  # serve the app

    While it is entered, every event the receiver accepts first goes to the ledger's
    store (``order_received`` ones recorded, durably, before the 200), then waits up to
    ``settle_wait`` real seconds for the pass that settles from it, so a caller retrying
    once the event was answered finds its order. Passes also run every ``every`` real
    seconds (an unresolved reference whose event came before its create gave up; the
    horizon of silence); with nothing unresolved a pass is one indexed query.
    ``webhook_id``: the receiver's webhook, checked ``active`` before silence counts.
    ``resend_after_silence``: see :class:`LedgerReconciler`.
    """
    settler = LedgerReconciler(
        client, resend_after_silence=resend_after_silence, webhook_id=webhook_id
    )

    async def record(event: WebhookEvent) -> None:
        if await settler.record([event]):
            await settler.settle_soon(within=settle_wait)

    stop = asyncio.Event()
    passes = asyncio.create_task(
        settler.run_forever(stop, every=every, most=every), name="order-ledger-reconciler"
    )
    passes.add_done_callback(_watch)
    receiver.add_recorder(record)
    try:
        yield settler
    finally:
        receiver.remove_recorder(record)
        stop.set()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError, ShippingError, OSError):
            async with asyncio.timeout(1.0):
                await asyncio.shield(passes)
        passes.cancel()
        await asyncio.gather(passes, return_exceptions=True)


def _watch(task: asyncio.Task[None]) -> None:
    """A side task is never silent: a pass loop that died says so."""
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        _log.error(
            "the order ledger's reconciler stopped: unresolved references no longer settle "
            "from evidence",
            exc_info=error,
        )
