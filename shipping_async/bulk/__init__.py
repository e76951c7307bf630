"""The bulk pipeline: quote, order, waybill and pickup for thousands of shipments."""

from shipping_async.bulk.choice import EstimateChooser, by_service, cheapest, parse_choice
from shipping_async.bulk.evidence import EvidenceJournal, OrderEvidence
from shipping_async.bulk.jobs import InvalidJob, OrderDetails, ShipmentJob
from shipping_async.bulk.journal import (
    JobRecord,
    JobState,
    Journal,
    JournalDataError,
    JournalError,
    JournalStateError,
    JournalUnavailableError,
    LeaseLostError,
)
from shipping_async.bulk.readers import count_rows, read_jobs
from shipping_async.bulk.reconcile import Reconciler, ReconcileReport, reconcile
from shipping_async.bulk.results import ResultStatus, ResultWriter, ShipmentResult, Stage
from shipping_async.bulk.shipper import BulkShipper, RunProgress
from shipping_async.bulk.sqlite_journal import SQLiteJournal

__all__ = [
    "BulkShipper",
    "EstimateChooser",
    "EvidenceJournal",
    "InvalidJob",
    "JobRecord",
    "JobState",
    "Journal",
    "JournalDataError",
    "JournalError",
    "JournalStateError",
    "JournalUnavailableError",
    "LeaseLostError",
    "OrderDetails",
    "OrderEvidence",
    "ReconcileReport",
    "Reconciler",
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
    "reconcile",
]
