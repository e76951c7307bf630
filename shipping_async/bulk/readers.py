"""Reading jobs from CSV or JSON-lines files, one row at a time; a bad row names its field.

The columns (CSV header, or keys of a flat JSON object per line); empty cells take the
default:

=================================  ========  ==============================================
column                             required  meaning
=================================  ========  ==============================================
customer_reference                 yes       your reference; also the job key by default
key, account                                 job key (default customer_reference); account
description_of_contents            yes       what is shipped
value_of_goods                     yes       decimal text, e.g. ``120.00``
value_of_goods_currency_id         yes       ISO 4217 code, e.g. ``USD``
origin_country_id                  yes       ISO 3166-1 numeric, e.g. 840 (US)
destination_country_id             yes       e.g. 276 (DE), 124 (CA)
hub_transit                                  true routes through a hub (default false)
mass_unit, distance_unit           yes       ``kg``/``cm`` or ``lb``/``inch``
package_weight, package_length,    yes       one package, in the units above
package_width, package_height
package_count                                identical packages (default 1)
purpose_of_shipment_id                       default 1
is_document, is_stackable,                   true/false (defaults false, true, false,
is_liftgate_required,                        false)
is_shipment_protection_required
origin_name, origin_address_1,     yes       the sender
origin_city
origin_company, origin_address_2,            more of the sender; export_code is used on
origin_province, origin_postal_code,         orders only
origin_email, origin_phone,
origin_classification,
origin_export_code
destination_* (the same, with                the receiver; name, address_1 and city are
import_code instead of export_code)          required
pickup_instructions                          for the driver
hs_code, hs_description,                     one customs line (all of code, description,
hs_quantity, hs_cost, hs_weight,             quantity, cost, weight; country defaults to
hs_country_id                                the origin)
pickup_earliest_date                         ``YYYY-MM-DD``: no pickup before that day
pickup_window_start,                         ``HH:MM`` local time at the origin: the wished
pickup_window_end                            window (default: earliest, minimum length)
=================================  ========  ==============================================

A JSON line may instead hold the nested form ``{"quote": {...}, "order": {...},
"pickup": {...}, "key": ...}`` (the fields of :class:`QuoteRequest`,
:class:`OrderDetails` and :class:`PickupWish`).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from shipping_async.bulk.jobs import InvalidJob, ShipmentJob
from shipping_async.errors import InputFileError, RequestValidationError
from shipping_async.models import validate_request

__all__ = ["MAX_LINE_BYTES", "count_rows", "read_jobs", "read_numbered_jobs"]

_REQUIRED = (
    "customer_reference",
    "description_of_contents",
    "value_of_goods",
    "value_of_goods_currency_id",
    "origin_country_id",
    "destination_country_id",
    "mass_unit",
    "distance_unit",
    "package_weight",
    "package_length",
    "package_width",
    "package_height",
    "origin_name",
    "origin_address_1",
    "origin_city",
    "destination_name",
    "destination_address_1",
    "destination_city",
)
_QUOTE_FLAGS = {
    "is_document": False,
    "is_stackable": True,
    "is_liftgate_required": False,
    "is_shipment_protection_required": False,
    "hub_transit": False,
}
_ADDRESS_FIELDS = (
    "name",
    "company",
    "address_1",
    "address_2",
    "city",
    "province",
    "postal_code",
    "email",
    "phone",
    "classification",
)
_HS_FIELDS = ("code", "description", "quantity", "cost", "weight", "country_id")
_TRUE = frozenset({"true", "yes", "y", "1", "t"})
_FALSE = frozenset({"false", "no", "n", "0", "f", ""})
_INDEX = re.compile(r"\[\d+\]")

# Where each nested path of a job comes from, to name the column in an error.
_COLUMN_OF: dict[str, str] = {
    "quote.packages[]": "package_count",
    "quote.packages[].weight": "package_weight",
    "quote.packages[].length": "package_length",
    "quote.packages[].width": "package_width",
    "quote.packages[].height": "package_height",
    "order.origin_address.country_id": "origin_country_id",
    "order.destination_address.country_id": "destination_country_id",
    "pickup.earliest_date": "pickup_earliest_date",
    "pickup.window_start": "pickup_window_start",
    "pickup.window_end": "pickup_window_end",
    **{f"order.hs_codes[].{name}": f"hs_{name}" for name in _HS_FIELDS},
    **{
        f"{part}.{side}_address.{name}": f"{side}_{name}"
        for part in ("quote", "order")
        for side in ("origin", "destination")
        for name in (*_ADDRESS_FIELDS, "import_code", "export_code")
    },
}


#: The longest line read (bytes): a longer one stops the reading with an InputFileError.
MAX_LINE_BYTES = 1 << 20
# Python's csv module (before 3.13) refuses a NUL anywhere in a line, which would make a NUL
# stop the whole file: it is carried through the parser as this noncharacter, put back in
# each cell, and refused per row with its field named, like every control character.
_NUL_STAND_IN = "\uffff"


class RowError(ValueError):
    """A row that does not make a job; ``field`` is the column at fault."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        super().__init__(f"field {field}: {reason}")


def read_jobs(path: str | Path) -> Iterator[ShipmentJob | InvalidJob]:
    """Stream the jobs of a ``.csv`` or ``.jsonl`` file, an :class:`InvalidJob` per bad row.

    Raises :class:`~shipping_async.errors.InputFileError` (file, line, reason) when the
    file itself cannot be read: bytes that are not UTF-8, a CSV field over
    ``csv.field_size_limit()``, a line over :data:`MAX_LINE_BYTES`. Nothing else escapes.
    """
    return (item for _, item in read_numbered_jobs(path))


def read_numbered_jobs(path: str | Path) -> Iterator[tuple[int, ShipmentJob | InvalidJob]]:
    """:func:`read_jobs` with the line each job starts on: ``(line, job)``."""
    path = Path(path)
    if _is_jsonl(path):
        return _read_jsonl(path)
    return _read_csv(path)


def count_rows(path: str | Path) -> int:
    """How many rows :func:`read_jobs` will yield (read once, nothing kept).

    Reads the whole file as :func:`read_jobs` does, so a file that cannot be read raises
    its :class:`~shipping_async.errors.InputFileError` here, before anything is sent.
    """
    path = Path(path)
    if _is_jsonl(path):
        return sum(1 for _, line in _lines(path) if line.strip())
    return max(0, sum(1 for _ in _csv_records(path)) - 1)  # the header is no row


def _is_jsonl(path: Path) -> bool:
    return path.suffix.lower() in (".jsonl", ".ndjson", ".json")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line, decoded as UTF-8 (a leading BOM dropped)."""
    try:
        file = path.open("rb")
    except OSError as exc:
        raise InputFileError(str(path), 0, f"cannot open: {exc.strerror or exc}") from None
    with file:
        number = 0
        while raw := file.readline(MAX_LINE_BYTES + 1):
            number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise InputFileError(str(path), number, f"line longer than {MAX_LINE_BYTES} bytes")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputFileError(
                    str(path),
                    number,
                    f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                    "save the file as UTF-8",
                ) from None
            yield number, text.removeprefix("\ufeff") if number == 1 else text


def _csv_records(path: Path) -> Iterator[tuple[int, list[str], bool]]:
    """Each CSV record as :class:`csv.DictReader` sees it: ``(line, cells, has_nul)``,
    the header first, blank lines skipped; ``line`` as ``DictReader.line_num`` has it
    (where the record ends); ``has_nul``: the record's lines held a NUL (carried as
    :data:`_NUL_STAND_IN`)."""
    read = 0  # the last line handed to the parser: where a parse error is
    nul = False

    def lines() -> Iterator[str]:
        nonlocal read, nul
        for read, line in _lines(path):  # noqa: B007 - read is the parser's position
            if "\x00" in line:
                nul = True
                yield line.replace("\x00", _NUL_STAND_IN)
            else:
                yield line

    records = csv.reader(lines())
    first = True
    while True:
        try:
            record = next(records)
            while not first and record == []:  # DictReader skips blank rows, not the header
                record = next(records)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputFileError(str(path), read, str(exc)) from None
        first = False
        yield records.line_num, record, nul
        nul = False


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line, cells)`` of each data row: the cells by column name, names and values
    stripped (a column whose name is empty, and cells beyond the header, left out; a
    missing cell is empty)."""
    records = _csv_records(path)
    header = next(records, None)
    if header is None:
        return
    names = [_restore_nul(name).strip() for name in header[1]]
    columns = [(index, name) for index, name in enumerate(names) if name]
    for line, record, nul in records:
        if nul:
            record = [_restore_nul(cell) for cell in record]
        size = len(record)
        yield (
            line,
            {name: record[index].strip() if index < size else "" for index, name in columns},
        )


def _restore_nul(text: str) -> str:
    return text.replace(_NUL_STAND_IN, "\x00")


def _read_csv(path: Path) -> Iterator[tuple[int, ShipmentJob | InvalidJob]]:
    for line, cells in _csv_rows(path):
        yield line, _job_from_cells(cells, line)


def _read_jsonl(path: Path) -> Iterator[tuple[int, ShipmentJob | InvalidJob]]:
    for line_number, line in _lines(path):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            yield (
                line_number,
                InvalidJob(key=f"line-{line_number}", row=line_number, error=f"{exc}"),
            )
            continue
        except RecursionError:
            error = "field (line): nested too deeply to be a shipment"
            yield line_number, InvalidJob(key=f"line-{line_number}", row=line_number, error=error)
            continue
        if not isinstance(data, dict):
            error = "field (line): expected a JSON object"
            yield line_number, InvalidJob(key=f"line-{line_number}", row=line_number, error=error)
        elif "quote" in data:
            yield line_number, _nested(data, line_number)
        else:
            row = {str(k): "" if v is None else str(v) for k, v in data.items()}
            yield line_number, _job_or_error(row, line_number)


def _nested(data: dict[str, Any], line: int) -> ShipmentJob | InvalidJob:
    order = data.get("order")
    reference = order.get("customer_reference") if isinstance(order, dict) else None
    key = str(data.get("key") or reference or f"line-{line}")
    try:
        job = msgspec.convert(data, ShipmentJob, strict=False)
        _validate(job)
    except (msgspec.ValidationError, RequestValidationError, RecursionError) as exc:
        return InvalidJob(key=key, row=line, error=f"line {line}: {_row_error(exc)}")
    return job


def _job_or_error(row: dict[str, str], line: int) -> ShipmentJob | InvalidJob:
    return _job_from_cells(
        {name.strip(): (value or "").strip() for name, value in row.items()}, line
    )


def _job_from_cells(cells: dict[str, str], line: int) -> ShipmentJob | InvalidJob:
    """The job of one flat row (names and values stripped), or why it is none."""
    key = cells.get("key") or cells.get("customer_reference") or f"line-{line}"
    try:
        job = msgspec.convert(_nest(cells), ShipmentJob, strict=False)
        _validate(job)
    except (RowError, msgspec.ValidationError, RequestValidationError) as exc:
        return InvalidJob(key=key, row=line, error=f"line {line}: {_row_error(exc)}")
    return job


def _row_error(exc: Exception) -> str:
    """``field COLUMN: reason`` for any refusal of a row."""
    if isinstance(exc, msgspec.ValidationError) and isinstance(
        exc.__cause__, RequestValidationError
    ):
        exc = exc.__cause__  # raised by a struct's own check (ShipmentJob's text check)
    if isinstance(exc, RequestValidationError):
        return "; ".join(f"field {_column(field)}: {reason}" for field, reason in exc.problems)
    if isinstance(exc, msgspec.ValidationError):
        return _field_error(exc)
    if isinstance(exc, RecursionError):
        return "field (line): nested too deeply to be a shipment"
    return str(exc)


def _validate(job: ShipmentJob) -> None:
    part = "quote"
    try:
        # The job keeps the quote request as checked: the client does not check it again.
        job.quote = validate_request(job.quote)
        part = "order"
        validate_request(job.order.to_request(1))
    except RequestValidationError as exc:
        problems = [(f"{part}.{field}", reason) for field, reason in exc.problems]
        raise RequestValidationError(*problems[0], problems=problems) from exc


def _nest(cells: dict[str, str]) -> dict[str, Any]:
    get = cells.get
    for name in _REQUIRED:
        if not get(name):
            raise RowError(name, "required, and empty or missing")
    origin, quote_origin = _address(cells, _ORIGIN)
    destination, quote_destination = _address(cells, _DESTINATION)
    quote: dict[str, Any] = {
        name: _flag(cells, name, default) for name, default in _QUOTE_FLAGS.items()
    }
    count = _int(cells, "package_count", 1)
    package = {dim: cells[column] for dim, column in _PACKAGE_COLUMNS}
    purpose = get("purpose_of_shipment_id") or "1"
    quote.update(
        origin_country_id=cells["origin_country_id"],
        destination_country_id=cells["destination_country_id"],
        purpose_of_shipment_id=purpose,
        value_of_goods=cells["value_of_goods"],
        value_of_goods_currency_id=cells["value_of_goods_currency_id"],
        mass_unit=cells["mass_unit"],
        distance_unit=cells["distance_unit"],
        packages=[package] * count,
        origin_address=quote_origin,
        destination_address=quote_destination,
    )
    order: dict[str, Any] = {
        "origin_address": origin,
        "destination_address": destination,
        "customer_reference": cells["customer_reference"],
        "description_of_contents": cells["description_of_contents"],
        "purpose_of_shipment_id": purpose,
        "pickup_instructions": get("pickup_instructions", ""),
    }
    hs = {name: get(column, "") for name, column in _HS_COLUMNS}
    if any(hs.values()):
        hs["country_id"] = hs["country_id"] or cells["origin_country_id"]
        order["hs_codes"] = [{k: v for k, v in hs.items() if v}]
    nested: dict[str, Any] = {"quote": quote, "order": order}
    pickup = {
        "earliest_date": get("pickup_earliest_date"),
        "window_start": _hhmm(cells, "pickup_window_start"),
        "window_end": _hhmm(cells, "pickup_window_end"),
    }
    if any(pickup.values()):
        nested["pickup"] = {k: v for k, v in pickup.items() if v}
    for name in ("key", "account"):
        value = get(name)
        if value:
            nested[name] = value
    return nested


#: One side's address columns: (field, column, whether the quote's address has it too:
#: all but the export or import code, which are for orders only), then the column of its
#: country.
_Side = tuple[tuple[tuple[str, str, bool], ...], str]


def _side(side: str, code: str) -> _Side:
    fields = (*_ADDRESS_FIELDS, code)
    columns = tuple((name, f"{side}_{name}", name != code) for name in fields)
    return columns, f"{side}_country_id"


_ORIGIN = _side("origin", "export_code")
_DESTINATION = _side("destination", "import_code")
_PACKAGE_COLUMNS = tuple((dim, f"package_{dim}") for dim in ("weight", "length", "width", "height"))
_HS_COLUMNS = tuple((name, f"hs_{name}") for name in _HS_FIELDS)
_HHMM = re.compile(r"\d{1,2}:\d{2}")


def _address(cells: dict[str, str], side: _Side) -> tuple[dict[str, Any], dict[str, Any]]:
    """One side's address for the order (with its export or import code) and for the
    quote (without)."""
    columns, country = side
    address: dict[str, Any] = {}
    quoted: dict[str, Any] = {}
    for name, column, in_quote in columns:
        value = cells.get(column)
        if value:
            address[name] = value
            if in_quote:
                quoted[name] = value
    address["country_id"] = quoted["country_id"] = cells[country]
    return address, quoted


def _flag(cells: dict[str, str], name: str, default: bool) -> bool:
    value = cells.get(name, "").lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise RowError(name, f"expected true or false, got {value!r}")


def _int(cells: dict[str, str], name: str, default: int) -> int:
    value = cells.get(name, "")
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise RowError(name, f"expected a whole number, got {value!r}") from None
    if not 1 <= number <= 999:
        raise RowError(name, f"must be between 1 and 999, got {number}")
    return number


def _hhmm(cells: dict[str, str], name: str) -> str | None:
    value = cells.get(name, "")
    if not value:
        return None
    if not _HHMM.fullmatch(value):
        raise RowError(name, f"expected HH:MM, got {value!r}")
    hour, minute = value.split(":")
    return f"{int(hour):02d}:{minute}:00"


def _field_error(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    reason, _, where = text.partition(" - at `$")
    path = where.rstrip("`").lstrip(".")
    missing = re.search(r"missing required field `(\w+)`", reason)
    if missing:
        path = f"{path}.{missing[1]}" if path else missing[1]
    return f"field {_column(path)}: {reason}"


def _column(path: str) -> str:
    generic = _INDEX.sub("[]", path)
    if generic in _COLUMN_OF:
        return _COLUMN_OF[generic]
    return generic.rpartition(".")[2] or generic
