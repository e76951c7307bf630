"""One result per shipment, and the writers that put results in a JSONL or CSV file."""

from __future__ import annotations

import csv
import os
import re
from datetime import date, time
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import msgspec

from shipping_async._escape import escape_controls
from shipping_async.bulk.journal import JobRecord, JobState

__all__ = ["ResultStatus", "ResultWriter", "ShipmentResult", "Stage"]


class Stage(StrEnum):
    """The stages of one shipment, in order; a result names the last one reached."""

    INPUT = "input"
    QUOTE = "quote"
    ORDER = "order"
    WAYBILL = "waybill"
    PICKUP = "pickup"


class ResultStatus(StrEnum):
    """How a shipment ended in this run."""

    DONE = "done"  # ordered, waybilled, pickup booked
    FAILED = "failed"  # stopped at ``stage``; see ``error`` and ``retryable``
    UNKNOWN = "unknown"  # POST /orders may have created an order: reconcile before retrying


_STAGE_OF_STATE = {
    JobState.PENDING: Stage.QUOTE,
    JobState.QUOTED: Stage.QUOTE,
    JobState.ORDERING: Stage.ORDER,
    JobState.ORDERED: Stage.ORDER,
    JobState.WAYBILLED: Stage.WAYBILL,
    JobState.DONE: Stage.PICKUP,
    JobState.UNKNOWN: Stage.ORDER,
}
_STATUS_OF_STATE = {
    JobState.DONE: ResultStatus.DONE,
    JobState.UNKNOWN: ResultStatus.UNKNOWN,
}


class ShipmentResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What happened to one shipment: the ids reached, the cost, or the error.

    ``resumed`` is true when an earlier run finished the job and this run only reports
    it. ``row`` is the input row (1-based, header excluded) for a row that did not parse.
    """

    key: str
    status: ResultStatus
    stage: Stage
    customer_reference: str | None = None
    hub: bool = False
    quote_id: int | None = None
    estimate_id: int | None = None
    carrier: str | None = None
    service: str | None = None
    cost: Decimal | None = None
    currency: str | None = None
    order_id: int | None = None
    waybills: list[str | None] = msgspec.field(default_factory=list)
    pickup_confirmation: str | None = None
    pickup_date: date | None = None
    pickup_from: time | None = None
    pickup_to: time | None = None
    error: str | None = None
    retryable: bool = False
    resumed: bool = False
    row: int | None = None
    #: How an unknown order outcome was settled (``reconciled from evidence: ...``).
    evidence: str | None = None

    @classmethod
    def from_record(cls, record: JobRecord, *, resumed: bool = False) -> ShipmentResult:
        """The result a journal record stands for."""
        if record.state is JobState.FAILED:
            stage = Stage(record.error_stage or Stage.QUOTE)
        else:
            stage = _STAGE_OF_STATE[record.state]
        return cls(
            key=record.key,
            status=_STATUS_OF_STATE.get(record.state, ResultStatus.FAILED),
            stage=stage,
            customer_reference=record.job.order.customer_reference,
            hub=record.hub,
            quote_id=record.quote_id,
            estimate_id=record.estimate_id,
            carrier=record.carrier,
            service=record.service,
            cost=record.cost,
            currency=record.currency,
            order_id=record.order_id,
            waybills=list(record.waybills),
            pickup_confirmation=record.pickup_confirmation,
            pickup_date=record.pickup_date,
            pickup_from=record.pickup_from,
            pickup_to=record.pickup_to,
            error=record.error,
            retryable=record.retryable,
            resumed=resumed,
            evidence=record.evidence,
        )

    @classmethod
    def invalid(cls, key: str, row: int | None, error: str) -> ShipmentResult:
        """The result of an input row that is not a valid shipment (never retryable as is)."""
        return cls(key=key, status=ResultStatus.FAILED, stage=Stage.INPUT, error=error, row=row)


#: The columns of a CSV result file, in order.
CSV_COLUMNS = tuple(ShipmentResult.__struct_fields__)

# A spreadsheet runs a cell that starts with one of these as a formula (OWASP's list,
# tab and carriage return included); a number such as -12.50 is left as it is.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")


def _spreadsheet_safe(value: object) -> object:
    """A CSV cell no spreadsheet runs and no terminal obeys: text starting like a formula
    gets a leading ``'``; control characters (tab and line breaks aside) and bidirectional
    overrides are written as their escapes (``\\x1b``), as the terminal shows them.

    >>> _spreadsheet_safe("=1+2"), _spreadsheet_safe("-12.50"), _spreadsheet_safe("K\\x07")
    ("'=1+2", '-12.50', 'K\\\\x07')
    """
    if not isinstance(value, str):
        return value
    value = escape_controls(value, keep_lines=True)  # a quoted cell keeps tab and line breaks
    if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def _create_private(path: Path) -> IO[str]:
    # Results hold names, phones and addresses: a new file is readable by its owner only.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    return open(fd, "w", encoding="utf-8", newline="")


class ResultWriter:
    """Writes results to ``path`` as JSON lines (``.jsonl``) or CSV (``.csv``), one per line.

    Each result is flushed as written, so a crash loses at most the line being written;
    the journal, not this file, is the record of what was done. A new file is created
    ``0600``; CSV cells that a spreadsheet would run as a formula start with ``'``, and
    their control characters are written escaped (JSON lines escape them as JSON does).
    """

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._csv = self._path.suffix.lower() == ".csv"
        self._file: IO[str] = _create_private(self._path)
        self._encoder = msgspec.json.Encoder()
        self._rows: Any = None
        if self._csv:
            self._rows = csv.DictWriter(self._file, fieldnames=CSV_COLUMNS)
            self._rows.writeheader()

    def write(self, result: ShipmentResult) -> None:
        """Append one result."""
        if self._rows is not None:
            row = msgspec.to_builtins(msgspec.structs.asdict(result))
            row["waybills"] = ";".join(waybill or "" for waybill in result.waybills)
            self._rows.writerow(
                {column: _spreadsheet_safe(row.get(column, "")) for column in CSV_COLUMNS}
            )
        else:
            self._file.write(self._encoder.encode(result).decode() + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
