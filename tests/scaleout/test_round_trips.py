"""PostgreSQL transactions per job of a worker on the happy path: at most 4.

Every statement the journal's connections send is logged (asyncpg's query logger on each
connection of both pools); a statement outside a transaction block, or the ``COMMIT`` of
one, is one transaction. A worker drains jobs of several accounts against fake APIs that
answer at once; each POST /orders finds its job's intent committed when it leaves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import pytest

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.worker import Worker
from shipping_async.clock import ManualClock
from shipping_async.scaleout.postgres_journal import PostgresJournal
from tests.bulk.fakes import FakeAPI

from .conftest import POSTGRES_DSN
from .support import make_job

ACCOUNTS = ("north", "south", "east", "west")
PER_ACCOUNT = 15


class Transactions:
    """Counts the transactions the journal's connections commit."""

    def __init__(self) -> None:
        self.count = 0
        self.counting = False

    async def watch(self, connection: asyncpg.Connection) -> None:
        def logged(_: Any) -> None:
            if self.counting and not connection.is_in_transaction():  # autocommit, COMMIT
                self.count += 1

        connection.add_query_logger(logged)


def intent_checked(
    api: FakeAPI, reader: asyncpg.Connection, one_at_a_time: asyncio.Lock, schema: str
) -> list[str]:
    """Make ``api``'s POST /orders, once on the wire, read its job's row (on a connection
    the journal does not use): the intent must be committed, under a claim, before the
    request left."""
    seen: list[str] = []
    on_the_wire = api.in_flight

    async def checked(reference: str) -> None:
        async with one_at_a_time:
            row = await reader.fetchrow(
                f'SELECT state, claim_token FROM "{schema}".jobs WHERE key = $1', reference
            )
        if row is not None and row["state"] == "ordering" and row["claim_token"] is not None:
            seen.append(reference)
        await on_the_wire(reference)

    api.in_flight = checked  # type: ignore[method-assign]
    return seen


async def _keep(_: asyncpg.Connection) -> None:
    """No reset, as the journal's own pools."""


@pytest.fixture
async def counted(pg_schema: str) -> AsyncIterator[tuple[PostgresJournal, Transactions, str]]:
    await (await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema)).close()  # migrate
    seen = Transactions()
    pools = [
        await asyncpg.create_pool(
            POSTGRES_DSN, min_size=0, max_size=size, init=seen.watch, reset=_keep
        )
        for size in (10, 1)
    ]
    journal = PostgresJournal(pools[0], pg_schema, lease_pool=pools[1])
    yield journal, seen, pg_schema
    await journal.close()


async def test_a_worker_needs_at_most_4_transactions_per_job(
    counted: tuple[PostgresJournal, Transactions, str],
) -> None:
    journal, seen, schema = counted
    clock = ManualClock()
    apis = {account: FakeAPI(clock) for account in ACCOUNTS}
    keys = [f"{account}-{index:02d}" for account in ACCOUNTS for index in range(PER_ACCOUNT)]
    await journal.add(
        [msgspec.structs.replace(make_job(key), account=key.split("-")[0]) for key in keys]
    )
    reader = await asyncpg.connect(POSTGRES_DSN)
    lock = asyncio.Lock()
    intents = [intent_checked(api, reader, lock, schema) for api in apis.values()]
    worker = Worker(journal, apis.__getitem__, clock=clock, lease=60, max_in_flight=16)

    seen.counting = True
    try:
        async with asyncio.timeout(60):
            done = [result.key async for result in worker.run()]
    finally:
        seen.counting = False
        await reader.close()

    assert sorted(done) == sorted(keys)
    failed = [record async for record in journal.records(states=[JobState.FAILED])]
    assert [record.error for record in failed] == []
    assert (await journal.counts())[JobState.DONE] == len(keys)
    assert sum(len(api.sent) for api in apis.values()) == len(keys)
    assert sorted(key for seen_by in intents for key in seen_by) == sorted(keys)
    assert seen.count / len(keys) <= 4, f"{seen.count} transactions for {len(keys)} jobs"
