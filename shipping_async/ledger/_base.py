"""The order ledger's protocol and entry: what a create with a known reference finds."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

import msgspec

from shipping_async.bulk.evidence import EvidenceStore

__all__ = ["EvidenceLedger", "LedgerEntry", "LedgerState", "OrderLedger"]

#: ``sending``: claimed by a create whose answer is not recorded (in flight, or its
#: process died); ``ordered``: the order exists; ``unknown``: sent, no usable answer.
LedgerState = Literal["sending", "ordered", "unknown"]


class LedgerEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One customer_reference in the ledger and what is known of its order."""

    customer_reference: str
    state: LedgerState
    order_id: int | None = None
    #: The API's answer that created the order (``{"order": {...}}``), when recorded.
    answer: bytes | None = None
    detail: str | None = None
    #: When the state last changed, on the store's clock (ISO 8601, UTC): for ``unknown``,
    #: when the create gave up on its answer.
    updated_at: str = ""
    #: When a create claimed the reference (before its request left), same clock.
    claimed_at: str = ""

    @property
    def resolved(self) -> bool:
        """Whether the order is known to exist (``ordered``)."""
        return self.state == "ordered"


@runtime_checkable
class OrderLedger(Protocol):
    """Order creations keyed by ``customer_reference``: the idempotency key the API lacks.

    Every method is one atomic step of the store, safe between processes sharing it:

    - ``claim(reference)``: ``None`` when this caller now owns the reference (state
      ``sending``) and may send; else the entry already there (sent before, do not send).
    - ``record_order`` / ``record_unknown``: what the create's answer said.
    - ``forget(reference)``: the create certainly did not create an order; the reference
      is free again.
    - ``resolve(reference, order_id, answer)``: settle an unresolved reference by hand or
      from evidence (``order_id=None``: no order exists; free it). ``unresolved()`` lists
      the references waiting for that (``sending`` and ``unknown``).
    """

    async def claim(self, customer_reference: str) -> LedgerEntry | None: ...

    async def record_order(self, customer_reference: str, order_id: int, answer: bytes) -> None: ...

    async def record_unknown(self, customer_reference: str, detail: str) -> None: ...

    async def forget(self, customer_reference: str) -> None: ...

    async def resolve(
        self, customer_reference: str, *, order_id: int | None, answer: bytes | None = None
    ) -> None: ...

    async def get(self, customer_reference: str) -> LedgerEntry | None: ...

    async def unresolved(self) -> list[LedgerEntry]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class EvidenceLedger(OrderLedger, EvidenceStore, Protocol):
    """An order ledger that keeps ``order_received`` evidence (both stores of this package),
    which :class:`~shipping_async.ledger.LedgerReconciler` settles from."""

    async def free_unknown(self, customer_reference: str, *, updated_at: str) -> bool:
        """Free the reference only if it is still the ``unknown`` entry stamped
        ``updated_at`` (the one silence was judged on, not a claim made since); whether
        it was."""
        ...
