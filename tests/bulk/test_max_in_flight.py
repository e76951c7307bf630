"""One budget of work in flight per process, across accounts: ``max_in_flight``.

On a manual clock with a fake API per account: jobs take a place once their turn to order
has come and before they are quoted, so a job waiting for a place holds no estimate.
"""

from __future__ import annotations

import asyncio

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.bulk.worker import Worker
from shipping_async.clock import ManualClock
from tests.bulk.fakes import drain, held_accounts, let_go_all, settle

ACCOUNTS = ("north", "south", "east")


async def test_jobs_of_every_account_share_the_places_and_wait_unquoted(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    apis, keys = await held_accounts(journal, clock, ACCOUNTS, 3)
    worker = Worker(journal, apis.__getitem__, clock=clock, lease=60, max_in_flight=2)
    running, results = drain(worker)
    await settle()
    quoted = sum(api.calls["POST /quotes"] for api in apis.values())
    sending = [key for api in apis.values() for key, event in api.reached.items() if event.is_set()]
    assert quoted == 2  # the others wait for a place, without an estimate
    assert len(sending) == 2

    let_go_all(apis, keys)
    async with asyncio.timeout(10):
        while not running.done():
            await settle()
            clock.advance(1)
    await running
    assert sorted(results) == sorted(keys)
    counts = await journal.counts()
    assert counts[JobState.DONE] == len(keys)
    # Every account got its turn: no account's jobs waited for another's to finish all.
    assert all(api.created for api in apis.values())
