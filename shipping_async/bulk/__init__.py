"""The bulk pipeline: quote, order, waybill and pickup for thousands of shipments."""

from shipping_async.bulk.jobs import OrderDetails, ShipmentJob
from shipping_async.bulk.journal import (
    JobRecord,
    JobState,
    Journal,
    JournalError,
    JournalStateError,
    LeaseLostError,
)

__all__ = [
    "JobRecord",
    "JobState",
    "Journal",
    "JournalError",
    "JournalStateError",
    "LeaseLostError",
    "OrderDetails",
    "ShipmentJob",
]
