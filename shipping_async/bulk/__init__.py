"""The bulk pipeline: quote, order, waybill and pickup for thousands of shipments."""

from shipping_async.bulk.choice import EstimateChooser, by_service, cheapest, parse_choice
from shipping_async.bulk.jobs import InvalidJob, OrderDetails, ShipmentJob
from shipping_async.bulk.journal import (
    JobRecord,
    JobState,
    Journal,
    JournalDataError,
    JournalError,
    JournalStateError,
    LeaseLostError,
)
from shipping_async.bulk.readers import count_rows, read_jobs
from shipping_async.bulk.results import ResultStatus, ResultWriter, ShipmentResult, Stage
from shipping_async.bulk.shipper import BulkShipper, RunProgress
from shipping_async.bulk.sqlite_journal import SQLiteJournal

__all__ = [
    "BulkShipper",
    "EstimateChooser",
    "InvalidJob",
    "JobRecord",
    "JobState",
    "Journal",
    "JournalDataError",
    "JournalError",
    "JournalStateError",
    "LeaseLostError",
    "OrderDetails",
    "ResultStatus",
    "ResultWriter",
    "RunProgress",
    "SQLiteJournal",
    "ShipmentJob",
    "ShipmentResult",
    "Stage",
    "by_service",
    "cheapest",
    "count_rows",
    "parse_choice",
    "read_jobs",
]
