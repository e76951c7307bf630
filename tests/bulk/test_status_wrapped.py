"""``status`` of a SQLite journal behind the outage guard (as a worker on a file runs it)."""

from __future__ import annotations

import io

from shipping_async.bulk._outage import SteadyJournal
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.cli.status import print_status
from tests.bulk.support import make_job


async def test_status_of_a_guarded_sqlite_journal_counts_without_accounts() -> None:
    journal = SteadyJournal(await SQLiteJournal.open(":memory:"))
    try:
        await journal.add([make_job("A"), make_job("B")])
        out = io.StringIO()
        await print_status(journal, out)
    finally:
        await journal.close()
    rows = out.getvalue().splitlines()
    assert rows[1].split()[0] == "*"
    assert rows[1].split()[-1] == "2"
