"""CSV rows are read as ``csv.DictReader`` reads them: same cells, same line numbers, same jobs.

The reader parses records with ``csv.reader`` and builds each row's cells itself (a NUL
restored only in the records that held one); these properties hold it to what
``DictReader`` gives for any header and rows: blank lines, short and long rows, quoted
newlines, NULs, empty or repeated column names.
"""

from __future__ import annotations

import csv
import io
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipping_async.bulk import readers

EXAMPLE = Path(__file__).parents[2] / "examples" / "shipments.csv"
TEMPLATE = list(csv.DictReader(EXAMPLE.open(newline="", encoding="utf-8")))
COLUMNS = [*TEMPLATE[0], "key", "account", "package_count", "pickup_window_start", "hs_code"]
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ODD = ["", " ", "\x00", "a\x00b", '"q"', "a,b", "x\ny", "\r\n", " 42 ", "true", "maybe", "25:99"]


def reference_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows as ``csv.DictReader`` reads them (the reader's former implementation),
    cells stripped as the reader strips them."""
    stand_in = "\uffff"
    lines = (line.replace("\x00", stand_in) for _, line in readers._lines(path))
    rows = csv.DictReader(lines)
    for row in rows:
        cells = {
            k.replace(stand_in, "\x00"): (v or "").replace(stand_in, "\x00")
            for k, v in row.items()
            if k and isinstance(v, str | None)
        }
        yield rows.line_num, {k.strip(): v.strip() for k, v in cells.items() if k.strip()}


@st.composite
def csv_files(draw: st.DrawFn) -> str:
    header = draw(st.lists(st.sampled_from([*COLUMNS, "", " ", "a\x00", " key "]), max_size=30))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for _ in range(draw(st.integers(0, 5))):
        base = TEMPLATE[draw(st.integers(0, len(TEMPLATE) - 1))]
        cells = [
            draw(st.sampled_from(ODD)) if draw(st.booleans()) else base.get(name, "")
            for name in header
        ]
        cut = draw(st.integers(0, len(cells) + 2))
        writer.writerow(cells[:cut] if cut <= len(cells) else [*cells, "extra"])
        if draw(st.booleans()):
            out.write(draw(st.sampled_from(["\n", "\r\n", "\n\n"])))
    return out.getvalue()


@SETTINGS
@given(text=csv_files())
def test_rows_cells_and_lines_are_those_of_dictreader(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "input.csv"
        path.write_bytes(text.encode("utf-8"))
        rows = list(readers._csv_rows(path))
        assert rows == list(reference_rows(path))
        assert readers.count_rows(path) == len(rows)
        items = list(readers.read_numbered_jobs(path))
        expected = [(line, readers._job_or_error(row, line)) for line, row in rows]
        assert items == expected


def test_a_blank_line_and_a_quoted_newline_give_the_lines_where_records_end(
    tmp_path: Path,
) -> None:
    path = tmp_path / "input.csv"
    path.write_text('a,b\n"x\ny",2\n\n3,4\n5,"6\n7"\n8,9\n', encoding="utf-8")
    assert [line for line, _ in readers._csv_rows(path)] == [3, 5, 7, 8]
    assert readers.count_rows(path) == 4


def test_the_quote_carries_each_address_as_the_order_does_but_its_customs_codes() -> None:
    # The spec's quote addresses take every address field ("more accurate quotes when
    # given"); export and import codes are for orders only.
    jobs = [job for job in readers.read_jobs(EXAMPLE) if isinstance(job, readers.ShipmentJob)]
    assert len(jobs) == len(TEMPLATE)
    for job, row in zip(jobs, TEMPLATE, strict=True):
        quote, order = job.quote, job.order
        assert quote.origin_address is not None
        assert quote.destination_address is not None
        assert quote.origin_address.postal_code == row["origin_postal_code"]
        assert quote.destination_address.postal_code == row["destination_postal_code"]
        assert quote.origin_address.province == order.origin_address.province
        assert quote.origin_address.export_code is None
        assert order.origin_address.export_code == (row["origin_export_code"] or None)
