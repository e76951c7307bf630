"""Hostile and careless files: cells that look like markup, control characters, formulas,
bytes that are not UTF-8, oversized fields, damaged journals. The CLI runs as a subprocess."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from shipping_async.bulk.jobs import InvalidJob, ShipmentJob
from shipping_async.bulk.readers import count_rows, read_jobs
from shipping_async.bulk.results import ResultStatus, ResultWriter, ShipmentResult, Stage
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from tests.bulk.support import make_job, write_csv

EXAMPLE = Path(__file__).parents[2] / "examples" / "shipments.csv"
TEXT_CELLS = (
    "customer_reference",
    "description_of_contents",
    "origin_name",
    "origin_company",
    "origin_address_1",
    "origin_city",
    "destination_name",
    "destination_address_1",
    "destination_city",
    "pickup_instructions",
    "hs_description",
)


def example_rows(count: int = 60) -> list[dict[str, str]]:
    return list(csv.DictReader(EXAMPLE.open(newline="")))[:count]


def cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipping_async", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_markup_and_control_characters_in_every_text_cell_finish_with_all_results(
    tmp_path: Path,
) -> None:
    rows = example_rows()
    for number, row in enumerate(rows):
        for name in TEXT_CELLS:
            if row.get(name):
                row[name] = f"{row[name]} [/] [bold]x[/bold] [link=http://e.example]y"
        if number % 2:  # every other row also carries a control character in each text cell
            for name in TEXT_CELLS:
                if row.get(name):
                    row[name] += " \x1b[2J\x07"
        row["customer_reference"] = f"ACME[/]{number}" + (" \x1b[2J" if number % 2 else "")
    source = write_csv(tmp_path / "shipments.csv", rows)
    out = tmp_path / "results.csv"

    done = cli("bulk", str(source), "--sandbox", "--progress", "bar", "--out", str(out))

    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert "\x1b" not in out.read_text(encoding="utf-8")  # escaped in the file as well
    with out.open(newline="", encoding="utf-8") as file:
        results = {row["key"]: row for row in csv.DictReader(file)}
    shown = {
        row["customer_reference"]: row["customer_reference"].replace("\x1b", "\\x1b")
        for row in rows
    }
    assert set(results) == set(shown.values())
    for number, row in enumerate(rows):
        result = results[shown[row["customer_reference"]]]
        if number % 2:
            assert result["status"] == "failed"
            assert result["stage"] == "input"
            assert "control character" in result["error"]
        else:
            assert result["status"] == "done", result
    assert "\x1b[2J" not in done.stdout + done.stderr
    assert "\\x1b[2J" in done.stdout  # shown, escaped, on the failure lines


def test_plain_progress_escapes_control_characters_in_keys(tmp_path: Path) -> None:
    rows = example_rows(2)
    rows[0]["customer_reference"] = "EVIL\x1b[2J\nforged line"
    source = write_csv(tmp_path / "shipments.csv", rows)

    done = cli("bulk", str(source), "--sandbox", "--progress", "plain")

    assert done.returncode == 1, done.stderr
    assert "\x1b" not in done.stdout
    assert "\nforged line" not in done.stdout
    assert "EVIL\\x1b[2J\\nforged line" in done.stdout


def test_status_escapes_control_characters_from_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "batch.journal"
    job = make_job("PO-1")
    connection = sqlite3.connect(path)
    connection.executescript(
        "CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, "
        "account TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, job BLOB NOT NULL, "
        "facts BLOB NOT NULL, retryable INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL "
        "DEFAULT 0, lease_owner TEXT, lease_until REAL, order_intent_at TEXT, "
        "updated_at TEXT NOT NULL)"
    )
    from shipping_async.bulk._journal_store import JOB_ENCODER

    connection.execute(
        "INSERT INTO jobs (key, account, state, job, facts, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
        ["K\x1b[2J\nforged", "", "unknown", JOB_ENCODER.encode(job), b"{}", "2026-01-01T00:00:00"],
    )
    connection.commit()
    connection.close()

    done = cli("status", "--journal", str(path))

    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout
    assert "K\\x1b[2J\\nforged" in done.stdout


def test_csv_results_neutralise_formula_prefixes(tmp_path: Path) -> None:
    path = tmp_path / "results.csv"
    hostile = ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\tTAB", "\rCR"]
    with ResultWriter(path) as writer:
        for text in hostile:
            writer.write(
                ShipmentResult(key=text, status=ResultStatus.FAILED, stage=Stage.INPUT, error=text)
            )

    with path.open(newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert [row["key"] for row in rows] == ["'" + text for text in hostile]
    assert [row["error"] for row in rows] == ["'" + text for text in hostile]


def test_csv_results_escape_control_characters_and_keep_line_breaks(tmp_path: Path) -> None:
    # A refused row's key and an API's error text are the two ways such text gets here.
    key = "K\x1b[2J\x00"
    error = "400: \x1b]8;;http://x\x07link\x1b]8;;\x07 \x85\u202eevil\nsecond line\tend"
    result = ShipmentResult(key=key, status=ResultStatus.FAILED, stage=Stage.INPUT, error=error)
    csv_path, jsonl_path = tmp_path / "results.csv", tmp_path / "results.jsonl"
    for path in (csv_path, jsonl_path):
        with ResultWriter(path) as writer:
            writer.write(result)

    text = csv_path.read_text(encoding="utf-8")
    assert not any(char in text for char in "\x1b\x00\x07\x85\u202e")
    with csv_path.open(newline="", encoding="utf-8") as file:
        row = next(csv.DictReader(file))
    assert row["key"] == "K\\x1b[2J\\x00"
    assert row["error"] == (
        "400: \\x1b]8;;http://x\\x07link\\x1b]8;;\\x07 \\x85\\u202eevil\nsecond line\tend"
    )
    # JSON lines keep every value exactly (JSON escapes what it must).
    kept = msgspec.json.decode(jsonl_path.read_bytes().splitlines()[0], type=ShipmentResult)
    assert (kept.key, kept.error) == (key, error)


def test_csv_results_keep_negative_numbers_as_numbers(tmp_path: Path) -> None:
    from decimal import Decimal

    path = tmp_path / "results.csv"
    with ResultWriter(path) as writer:
        writer.write(
            ShipmentResult(
                key="PO-1", status=ResultStatus.DONE, stage=Stage.PICKUP, cost=Decimal("-12.50")
            )
        )
    with path.open(newline="", encoding="utf-8") as file:
        assert next(csv.DictReader(file))["cost"] == "-12.50"


async def test_journal_and_results_files_are_created_owner_only(tmp_path: Path) -> None:
    journal_path = tmp_path / "batch.journal"
    async with await SQLiteJournal.open(journal_path) as journal:
        await journal.add([make_job("PO-1")])
        modes = {
            name: stat.S_IMODE(os.stat(tmp_path / name).st_mode)
            for name in os.listdir(tmp_path)
            if name.startswith("batch.journal")
        }
    results = tmp_path / "results.jsonl"
    ResultWriter(results).close()

    assert "batch.journal" in modes
    assert set(modes.values()) == {0o600}, modes
    assert stat.S_IMODE(results.stat().st_mode) == 0o600


# -- malformed inputs: exit 2 with the file, the line and the field; no traceback ----------


def header_and_row() -> tuple[list[str], dict[str, str]]:
    rows = example_rows(1)
    return list(rows[0]), rows[0]


def test_a_csv_field_over_the_limit_exits_2_naming_the_line(tmp_path: Path) -> None:
    rows = example_rows(3)
    rows[1]["pickup_instructions"] = "x" * 200_000
    source = write_csv(tmp_path / "big.csv", rows)

    done = cli("bulk", str(source), "--sandbox", "--progress", "plain")

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"{source}:3:" in done.stderr
    assert "field larger than field limit" in done.stderr


@pytest.mark.parametrize(
    "encoding", [pytest.param("latin-1", id="latin-1"), pytest.param("cp1252", id="cp1252")]
)
def test_a_file_that_is_not_utf8_exits_2_naming_the_line(tmp_path: Path, encoding: str) -> None:
    rows = example_rows(3)
    rows[2]["destination_name"] = "Zoë Müller"
    source = write_csv(tmp_path / "latin.csv", rows, encoding=encoding)

    done = cli("bulk", str(source), "--sandbox", "--progress", "plain")

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"{source}:4: not UTF-8 text" in done.stderr


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        pytest.param([1, 2], "field order: Expected `object`, got `array`", id="list"),
        pytest.param("PO-1", "field order: Expected `object`, got `str`", id="string"),
    ],
)
def test_a_jsonl_order_that_is_not_an_object_is_a_failed_row_naming_the_field(
    tmp_path: Path, order: object, expected: str
) -> None:
    good = msgspec_builtins(make_job("PO-GOOD"))
    bad = {**msgspec_builtins(make_job("PO-BAD")), "order": order}
    source = tmp_path / "jobs.jsonl"
    source.write_text(json.dumps(bad) + "\n" + json.dumps(good) + "\n")

    items = list(read_jobs(source))

    assert isinstance(items[0], InvalidJob)
    assert items[0].error == f"line 1: {expected}"
    assert isinstance(items[1], ShipmentJob)


def test_jsonl_nested_200000_deep_is_a_failed_row_and_the_cli_finishes(tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text("[" * 200_000 + "\n" + '{"quote": ' + "[" * 200_000 + "\n")

    items = list(read_jobs(source))
    done = cli("bulk", str(source), "--sandbox", "--progress", "plain")

    assert [type(item) for item in items] == [InvalidJob, InvalidJob]
    assert all("nested too deeply" in item.error for item in items if isinstance(item, InvalidJob))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr


def test_a_line_over_the_length_limit_is_a_file_error(tmp_path: Path) -> None:
    from shipping_async.bulk.readers import MAX_LINE_BYTES
    from shipping_async.errors import InputFileError

    source = tmp_path / "jobs.jsonl"
    source.write_text("{}\n" + "x" * (MAX_LINE_BYTES + 10) + "\n")

    with pytest.raises(InputFileError) as caught:
        count_rows(source)
    assert (caught.value.path, caught.value.line) == (str(source), 2)


def test_nul_and_control_characters_are_refused_per_row_naming_the_field(
    tmp_path: Path,
) -> None:
    rows = example_rows(4)
    rows[1]["origin_name"] = "Ship\x00ping Desk"
    rows[2]["destination_city"] = "Ber\x1blin"
    source = write_csv(tmp_path / "nul.csv", rows)

    items = list(read_jobs(source))

    assert [type(item) for item in items] == [ShipmentJob, InvalidJob, InvalidJob, ShipmentJob]
    assert isinstance(items[1], InvalidJob)
    assert isinstance(items[2], InvalidJob)
    assert items[1].error.startswith("line 3: field origin_name: holds the control character")
    assert items[2].error.startswith("line 4: field destination_city: holds the control")


def write_journal_row(path: Path, *, state: str, job: bytes | None) -> None:
    """A journal of the example's first shipment, whose row is then damaged."""
    import asyncio

    from shipping_async.bulk._journal_store import JOB_ENCODER

    first = next(read_jobs(EXAMPLE))
    assert isinstance(first, ShipmentJob)

    async def create() -> None:
        async with await SQLiteJournal.open(path) as journal:
            await journal.add([first])

    asyncio.run(create())
    connection = sqlite3.connect(path)
    connection.execute("UPDATE jobs SET state = ? WHERE key = ?", [state, first.key])
    connection.execute(
        "UPDATE job_inputs SET job = ? WHERE seq = (SELECT seq FROM jobs WHERE key = ?)",
        [job or JOB_ENCODER.encode(first), first.key],
    )
    connection.commit()
    connection.close()


@pytest.mark.parametrize(
    ("state", "job", "column"),
    [
        pytest.param("shipped-ish", None, "state", id="unknown-state"),
        pytest.param("unknown", b"{not json", "job", id="job-not-json"),
    ],
)
def test_a_damaged_journal_exits_2_naming_the_key_and_column(
    tmp_path: Path, state: str, job: bytes | None, column: str
) -> None:
    path = tmp_path / "batch.journal"
    write_journal_row(path, state=state, job=job)

    done = cli("bulk", str(EXAMPLE), "--sandbox", "--journal", str(path), "--resume")
    status = cli("status", "--journal", str(path))

    for run in (done, status):
        assert run.returncode == 2, run.stdout + run.stderr
        assert "Traceback" not in run.stderr
        assert f"job 'PO-2026-1001': column {column}:" in run.stderr


def test_a_journal_that_is_not_sqlite_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "batch.journal"
    path.write_bytes(b"this is not a database, " * 100)

    done = cli("bulk", str(EXAMPLE), "--sandbox", "--journal", str(path), "--resume")

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "file is not a database" in done.stderr


def test_a_plain_http_remote_base_url_exits_2(tmp_path: Path) -> None:
    done = cli(
        "bulk",
        str(EXAMPLE),
        "--base-url",
        "http://api.example.com/client_api/v2",
        "--journal",
        str(tmp_path / "j"),
        env={"SHIPPING_ACCESS_TOKEN": "t0ken"},
    )

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "must use https" in done.stderr


def msgspec_builtins(job: ShipmentJob) -> dict[str, object]:
    import msgspec

    data: dict[str, object] = msgspec.to_builtins(job)
    return data
