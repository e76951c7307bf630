"""The PostgreSQL journal's connection pool: no reset round trip after each call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from shipping_async.scaleout.postgres_journal import PostgresJournal

from .conftest import POSTGRES_DSN
from .support import make_job


@pytest.fixture
async def journal(pg_schema: str) -> AsyncIterator[PostgresJournal]:
    # One connection, so the query logger below sees every statement the journal sends.
    journal = await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema, max_size=1)
    yield journal
    await journal.close()


async def test_released_connections_are_not_reset(journal: PostgresJournal) -> None:
    sent: list[str] = []
    async with journal._pool.acquire() as connection:
        connection.add_query_logger(lambda record: sent.append(record.query))
    await journal.add([make_job("pool-1")])
    await journal.counts()
    claimed = await journal.claim("w1", lease=30.0, limit=5)

    assert [record.key for record in claimed] == ["pool-1"]
    assert sent  # the logger saw the journal's statements
    assert not [query for query in sent if "RESET ALL" in query or "UNLISTEN" in query]


async def test_a_renewal_does_not_wait_for_a_busy_pool(journal: PostgresJournal) -> None:
    await journal.add([make_job("pool-2")])
    (claimed,) = await journal.claim("w1", lease=30.0, limit=1)
    assert claimed.claim_token is not None
    # Every connection of the journal's pool is taken, as by job writes under load.
    async with journal._pool.acquire():
        renewed = await asyncio.wait_for(
            journal.renew({claimed.key: claimed.claim_token}, lease=30.0), 2.0
        )
    assert renewed == {"pool-2"}
