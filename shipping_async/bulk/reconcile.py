"""Unknown orders settle themselves: ``order_received`` events prove which orders exist.

A job is ``UNKNOWN`` when POST /orders was on the wire and no usable answer came back (a
dropped connection, a timeout, a 5xx, a dead process): an order may exist that the journal
has no id for. The API offers no search by ``customer_reference``, but every new order
fires ``shipment.updated.status`` / ``order_received`` with its id (section 6), recorded as
evidence by the journal (:mod:`shipping_async.bulk.evidence`). For each unknown job:

1. **Candidates**: orders first heard of since ``intent - skew`` (the intent is stamped
   before the request is sent, on the same clock as the evidence), however late: an
   event recorded after the horizon (its receiver's store was away, the API's last retry
   ran late) still proves its order. That no *other* job holds.
2. **Match**: ``GET /orders/{id}`` of each candidate; its ``customer_reference`` must be
   the job's, and its ``quote_id`` the job's quote where both are known.
3. **One match**: the job becomes ``ORDERED`` with that id (the run continues with the
   waybill and the pickup), and :attr:`~shipping_async.bulk.journal.JobRecord.evidence`
   says why. **Two matches**, or **two jobs with one reference**: left ``UNKNOWN``, and
   the report says why. Nothing is ever guessed.
4. **Silence**: no match although the API's whole retry horizon has passed since the
   intent (:data:`SILENCE_HORIZON`: the first attempt and four retries about 20, 40, 60
   and 80 s apart, each with a delivery timeout, plus a margin) while *other* orders'
   events kept arriving (and the webhook is ``active``, when the caller can tell): the
   order was most likely never created. That is reported; the job is sent again only
   with ``resend_after_silence=True``.

Its limits are those of its evidence: a webhook turned ``failing`` sends nothing, and a
receiver that was down (or a process that did not record) loses the events of that time.
Silence is therefore only *reported* unless the caller opts in, and it needs other events
to have arrived after the intent, which a dead receiver could not have recorded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta
from typing import Unpack

from shipping_async.bulk._evidence_rules import (
    CLOCK_SKEW,
    DELIVERY_TIMEOUT,
    RETRY_DELAYS,
    SILENCE_HORIZON,
    EvidenceRules,
    OrderReader,
    ReconcileReport,
    Remaining,
    RulesOptions,
    Settled,
    UnknownOrder,
)
from shipping_async.bulk.evidence import EvidenceJournal, OrderEvidence
from shipping_async.bulk.journal import JobRecord, JournalStateError
from shipping_async.clock import Clock
from shipping_async.models.webhooks import WebhookEvent

__all__ = [
    "CLOCK_SKEW",
    "DELIVERY_TIMEOUT",
    "RETRY_DELAYS",
    "SILENCE_HORIZON",
    "EvidenceRules",
    "ReconcileReport",
    "Reconciler",
    "Remaining",
    "Settled",
    "UnknownOrder",
    "describe_evidence",
    "reconcile",
]


class Reconciler(EvidenceRules):
    """Settles ``UNKNOWN`` jobs of ``journal`` from its ``order_received`` evidence.

    The options are :class:`EvidenceRules`'.
    """

    def __init__(
        self, journal: EvidenceJournal, client: OrderReader, **options: Unpack[RulesOptions]
    ) -> None:
        if not isinstance(journal, EvidenceJournal):
            raise TypeError("journal: keeps no order_received evidence")
        super().__init__(journal, client, **options)
        self.journal = journal

    async def run_once(self) -> ReconcileReport:
        """One pass over every ``UNKNOWN`` job."""
        report = ReconcileReport()
        unknown = await self.journal.needs_reconciliation()
        if not unknown:
            return report
        sharing = await self._references_shared([record.key for record in unknown])
        return await self._judge_all((self._unknown(record, sharing) for record in unknown), report)

    @staticmethod
    def _unknown(record: JobRecord, sharing: dict[str, set[str]]) -> UnknownOrder | Remaining:
        reference = record.job.order.customer_reference
        if record.order_intent_at is None:
            return Remaining(key=record.key, reason="no order intent time")
        others = sharing.get(reference, set()) - {record.key}
        if others:
            reason = (
                f"customer_reference {reference!r} is shared with job(s) "
                f"{', '.join(sorted(others)[:5])}: evidence cannot tell their orders apart"
            )
            return Remaining(key=record.key, reason=reason)
        return UnknownOrder(
            key=record.key,
            customer_reference=reference,
            sent_from=record.order_intent_at,
            sent_by=record.order_intent_at,
            account=record.account,
            quote_id=record.quote_id,
        )

    async def _settle_found(
        self, unknown: UnknownOrder, event: OrderEvidence
    ) -> Settled | Remaining:
        evidence = (
            f"reconciled from evidence: order_received for order {event.order_id} at "
            f"{event.received_at.isoformat(timespec='seconds')}, customer_reference matched"
        )
        try:
            await self.journal.reconcile(unknown.key, order_id=event.order_id, evidence=evidence)
        except JournalStateError as exc:  # settled meanwhile (a late answer, a person)
            return Remaining(key=unknown.key, reason=f"settled meanwhile: {exc}")
        return Settled(key=unknown.key, order_id=event.order_id, evidence=evidence)

    async def _settle_silent(self, unknown: UnknownOrder, reason: str) -> Settled | None:
        evidence = f"re-sent after silence: {reason}"
        try:
            await self.journal.reconcile(unknown.key, order_id=None, evidence=evidence)
        except JournalStateError:
            return None
        return Settled(key=unknown.key, order_id=None, evidence=evidence)

    async def _references_shared(self, keys: list[str]) -> dict[str, set[str]]:
        """customer_reference -> keys of every job with it, for the references of ``keys``."""
        wanted: set[str] = set()
        by_key: dict[str, str] = {}
        async for record in self.journal.records():
            by_key[record.key] = record.job.order.customer_reference
        for key in keys:
            wanted.add(by_key[key])
        shared: dict[str, set[str]] = defaultdict(set)
        for key, reference in by_key.items():
            if reference in wanted:
                shared[reference].add(key)
        return shared


async def describe_evidence(
    journal: EvidenceJournal,
    record: JobRecord,
    *,
    speed: float = 1.0,
    horizon: float = SILENCE_HORIZON,
    skew: float = CLOCK_SKEW,
) -> str:
    """What the journal's evidence alone says of an unknown job (no API call): for
    ``status``. ``speed``: API-clock seconds per real second (a scaled sandbox)."""
    if record.order_intent_at is None:
        return "no order intent time"
    intent = record.order_intent_at
    horizon_real = timedelta(seconds=horizon / speed)
    now = await journal.evidence_now()
    window = await journal.order_received(since=intent - timedelta(seconds=skew))
    candidates = [e for e in window if e.owner is None or e.owner == record.key]
    waited = (now - intent).total_seconds() * speed
    if candidates:
        ids = ", ".join(str(e.order_id) for e in candidates[:5])
        return (
            f"{len(candidates)} candidate order(s) announced ({ids}): run shipping-async reconcile"
        )
    if now < intent + horizon_real:
        return f"no order_received event yet, {waited:.0f} of {horizon:.0f} s waited"
    arrived = await journal.order_received(since=intent, until=now)
    if not arrived:
        return f"no order_received event in {waited:.0f} s, and no other event either: no proof"
    return f"no order_received event in {waited:.0f} s while {len(arrived)} other events arrived"


async def reconcile(
    journal: EvidenceJournal,
    client: OrderReader,
    events: Iterable[WebhookEvent] = (),
    *,
    clock: Clock | None = None,
    horizon: float = SILENCE_HORIZON,
    resend_after_silence: bool = False,
) -> ReconcileReport:
    """Record ``events`` (from your own receiver) and settle what they prove, once.

    ::

        report = await reconcile(journal, client, events_received_since_last_time)
        for settled in report.settled: ...   # now ORDERED: a run continues them
        for left in report.remaining: ...    # still UNKNOWN, and why
    """
    reconciler = Reconciler(
        journal, client, clock=clock, horizon=horizon, resend_after_silence=resend_after_silence
    )
    await reconciler.record(events)
    return await reconciler.run_once()
