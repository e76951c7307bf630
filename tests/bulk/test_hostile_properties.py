"""Properties: whatever bytes a file or a row holds, only documented errors leave the input
readers and the request structs, and no accepted job holds a control character."""

from __future__ import annotations

import csv
import io
import re
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipping_async.bulk.jobs import InvalidJob, ShipmentJob
from shipping_async.bulk.readers import count_rows, read_jobs
from shipping_async.errors import InputFileError, RequestValidationError
from shipping_async.models import QuoteRequest, validate_request

EXAMPLE = Path(__file__).parents[2] / "examples" / "shipments.csv"
FIRST_ROW = next(csv.DictReader(EXAMPLE.open(newline="", encoding="utf-8")))
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text as careless and hostile users write it: markup, controls, formulas, any unicode.
hostile_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["[/]", "[bold]", "\x1b[2J", "\x00", "=1+2", "\r\n", "\u202e", "\ufeff"]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


def read_all(content: bytes, suffix: str) -> list[ShipmentJob | InvalidJob]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"input{suffix}"
        path.write_bytes(content)
        try:
            count = count_rows(path)
            items = list(read_jobs(path))
        except InputFileError as exc:
            error = exc
        else:
            assert len(items) == count
            return items
    assert error.path == str(path)
    assert error.line >= 0
    return []


def assert_only_jobs_without_controls(items: list[ShipmentJob | InvalidJob]) -> None:
    for item in items:
        assert isinstance(item, ShipmentJob | InvalidJob)
        if isinstance(item, ShipmentJob):
            assert not any(CONTROL.search(text) for text in strings(msgspec.to_builtins(item)))


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return []


@SETTINGS
@given(content=st.binary(max_size=2000), suffix=st.sampled_from([".csv", ".jsonl"]))
def test_any_bytes_give_jobs_invalid_rows_or_an_input_file_error(
    content: bytes, suffix: str
) -> None:
    assert_only_jobs_without_controls(read_all(content, suffix))


@SETTINGS
@given(changes=st.dictionaries(st.sampled_from(sorted(FIRST_ROW)), hostile_text, max_size=6))
def test_any_cells_give_a_job_or_a_row_error_and_no_job_holds_a_control(
    changes: dict[str, str],
) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(FIRST_ROW))
    writer.writeheader()
    writer.writerow({**FIRST_ROW, **changes})
    items = read_all(out.getvalue().encode("utf-8", "surrogatepass"), ".csv")
    assert_only_jobs_without_controls(items)


@SETTINGS
@given(row=st.dictionaries(st.text(max_size=12), json_values, max_size=8))
def test_any_json_line_gives_a_job_or_a_row_error(row: dict[str, Any]) -> None:
    nested = {"quote": row.get("quote", row), "order": row.get("order", row), **row}
    for data in (row, nested):
        line = msgspec.json.encode(data) + b"\n"
        assert_only_jobs_without_controls(read_all(line, ".jsonl"))


@SETTINGS
@given(data=st.dictionaries(st.sampled_from(list(QuoteRequest.__struct_fields__)), json_values))
def test_request_structs_raise_only_validation_errors(data: dict[str, Any]) -> None:
    try:
        request = msgspec.convert(data, QuoteRequest, strict=False)
    except msgspec.ValidationError:
        return
    problems: list[tuple[str, str]] = []
    try:
        validate_request(request)
    except RequestValidationError as exc:
        problems = exc.problems
        assert problems
