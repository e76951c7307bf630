"""A NUL or control character in one row is refused for that row, the same whichever journal:
before, PostgreSQL refused the whole batch (0 of 8 enqueued) while SQLite stored the NUL
and sent it to the API."""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shipping_async.bulk.jobs import InvalidJob, ShipmentJob
from shipping_async.bulk.journal import Journal
from shipping_async.bulk.readers import read_jobs
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.errors import RequestValidationError
from shipping_async.scaleout.postgres_journal import PostgresJournal

from .conftest import POSTGRES_DSN
from .support import make_job

EXAMPLE = Path(__file__).parents[2] / "examples" / "shipments.csv"


@pytest.fixture(params=["sqlite", "postgres"])
async def journal(
    request: pytest.FixtureRequest, tmp_path: Path, pg_schema: str
) -> AsyncIterator[Journal]:
    if request.param == "sqlite":
        opened: Journal = await SQLiteJournal.open(tmp_path / "batch.journal")
    else:
        opened = await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema)
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_nul_in_one_row_leaves_the_other_seven_enqueued(
    journal: Journal, tmp_path: Path
) -> None:
    rows = list(csv.DictReader(EXAMPLE.open(newline="", encoding="utf-8")))[:8]
    rows[2]["destination_address_1"] = "Torstrasse\x00101"
    source = tmp_path / "shipments.csv"
    with source.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    items = list(read_jobs(source))
    jobs = [item for item in items if isinstance(item, ShipmentJob)]
    records = await journal.add(jobs)

    invalid = [item for item in items if isinstance(item, InvalidJob)]
    assert [item.row for item in invalid] == [4]
    assert invalid[0].error.startswith("line 4: field destination_address_1: holds the control")
    assert len(records) == 7
    assert sum((await journal.counts()).values()) == 7


def test_a_job_built_in_code_with_a_nul_is_refused_before_any_journal() -> None:
    job = make_job("PO-1", "acme")
    with pytest.raises(RequestValidationError) as caught:
        ShipmentJob(quote=job.quote, order=job.order, key="PO-\x001")
    assert caught.value.field == "key"
