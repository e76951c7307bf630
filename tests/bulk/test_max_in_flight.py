"""One budget of work in flight per process, across accounts: ``max_in_flight``.

On a manual clock with a fake API per account: jobs take a place once their turn to order
has come and before they are quoted, so a job waiting for a place holds no estimate.
"""

from __future__ import annotations

import asyncio

import msgspec

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.bulk.worker import Worker
from shipping_async.clock import ManualClock
from tests.bulk.fakes import FakeAPI, settle
from tests.bulk.support import make_job

ACCOUNTS = ("north", "south", "east")


async def test_jobs_of_every_account_share_the_places_and_wait_unquoted(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    apis = {account: FakeAPI(clock) for account in ACCOUNTS}
    keys = [f"{account}-{index}" for account in ACCOUNTS for index in range(3)]
    await journal.add(
        [msgspec.structs.replace(make_job(key), account=key.split("-")[0]) for key in keys]
    )
    for api in apis.values():
        for key in keys:
            api.hold(key)  # every POST /orders stays in flight until let go
    worker = Worker(journal, apis.__getitem__, clock=clock, lease=60, max_in_flight=2)
    results: list[str] = []

    async def drain() -> None:
        async for result in worker.run():
            results.append(result.key)

    running = asyncio.create_task(drain())
    await settle()
    quoted = sum(api.calls["POST /quotes"] for api in apis.values())
    sending = [key for api in apis.values() for key, event in api.reached.items() if event.is_set()]
    assert quoted == 2  # the others wait for a place, without an estimate
    assert len(sending) == 2

    for api in apis.values():
        for key in keys:
            api.let_go(key)
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
