"""Evidence in the journal: the ``order_received`` events the API sent, one row per order.

Every new order fires ``shipment.updated.status`` with ``updated_value`` ``order_received``
(spec section 6; once per leg on a hub order, and again on every retried delivery). A
journal that keeps evidence records the *order id* and the time it first heard of it, on
the store's own clock (the clock that stamps order intents: the database's ``now()`` for
PostgreSQL, the host's wall clock for a SQLite file), so the two compare. A second
delivery, or the second leg, adds nothing but a count. The reconciler
(:mod:`shipping_async.bulk.reconcile`) reads these rows back around each unknown job's
order intent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

import msgspec

from shipping_async.bulk.journal import Journal
from shipping_async.models.webhooks import EventType, WebhookEvent

__all__ = ["EvidenceJournal", "EvidenceStore", "OrderEvidence", "order_received_ids"]

ORDER_RECEIVED = "order_received"


class OrderEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """One order the API announced: when we first heard of it, and whose it is."""

    order_id: int
    received_at: datetime  # on the store's clock, like JobRecord.order_intent_at
    deliveries: int = 1  # deliveries of order_received for this order (legs, retries)
    owner: str | None = None  # the key of the job (or ledger entry) that holds this order id


@runtime_checkable
class EvidenceStore(Protocol):
    """A store that keeps ``order_received`` evidence: both journals, both order ledgers."""

    async def record_order_received(self, order_ids: Sequence[int]) -> int:
        """Record that these orders were announced now; returns how many were new.

        Deduplicated by order id: a repeat delivery or a hub order's second leg only
        counts a delivery more. Durable on return (a receiver answers 200 after it).
        """
        ...

    async def order_received(
        self, *, since: datetime, until: datetime | None = None
    ) -> list[OrderEvidence]:
        """Orders first heard of within ``[since, until]``, oldest first, with their owner."""
        ...

    async def evidence_now(self) -> datetime:
        """Now on the store's clock (the clock of ``received_at`` and order intents)."""
        ...


@runtime_checkable
class EvidenceJournal(Journal, EvidenceStore, Protocol):
    """A journal that keeps ``order_received`` evidence (both stores of this package)."""


def order_received_ids(events: Iterable[WebhookEvent]) -> list[int]:
    """The order ids of the ``order_received`` status events among ``events``."""
    return [
        event.object_id
        for event in events
        if event.event_type == EventType.SHIPMENT_STATUS
        and event.updated_value == ORDER_RECEIVED
        and event.object_type == "order"
    ]
