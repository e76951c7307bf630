"""The order ledger: exactly-once order creation keyed by ``customer_reference``.

The API has no idempotency key: a create whose answer was lost, sent again, makes a
second order. With a ledger on the client (``AsyncShippingClient(order_ledger=...)``),
``orders.create`` claims the reference first: a reference already ordered returns that
order without sending; one whose earlier create has no recorded answer raises
``OrderOutcomeUnknownError`` instead of sending again, until ``orders.resolve`` settles
it, by hand or from webhook evidence (:func:`settle_from_webhooks`, see
:mod:`shipping_async.ledger.evidence`). Stores: :class:`SQLiteOrderLedger` (a file),
:class:`PostgresOrderLedger` (extra ``postgres``, imported on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shipping_async.ledger._base import EvidenceLedger, LedgerEntry, LedgerState, OrderLedger
from shipping_async.ledger.evidence import LedgerReconciler, settle_from_webhooks
from shipping_async.ledger.sqlite import SQLiteOrderLedger

if TYPE_CHECKING:
    from shipping_async.ledger.postgres import PostgresOrderLedger

__all__ = [
    "EvidenceLedger",
    "LedgerEntry",
    "LedgerReconciler",
    "LedgerState",
    "OrderLedger",
    "PostgresOrderLedger",
    "SQLiteOrderLedger",
    "settle_from_webhooks",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresOrderLedger":
        from shipping_async.ledger.postgres import PostgresOrderLedger

        return PostgresOrderLedger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
