"""The PostgreSQL journal's connection pool: no reset round trip after each call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from shipping_async.bulk.journal import JobState
from shipping_async.scaleout import postgres_journal
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


async def claimed(journal: PostgresJournal, key: str) -> tuple[str, str]:
    await journal.add([make_job(key)])
    (record,) = await journal.claim("w1", lease=30.0, limit=1, keys=[key])
    assert record.claim_token is not None
    await journal.record(record.claim_token, key, JobState.QUOTED, quote_id=1, estimate_id=2)
    return record.key, record.claim_token


async def test_writes_keep_a_few_connections_and_the_pool_still_serves_the_rest(
    pg_schema: str,
) -> None:
    journal = await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema, max_size=3)
    try:
        jobs = [await claimed(journal, f"keep-{index}") for index in range(8)]
        # Eight writes at once: each needs a connection; at most two stay kept after.
        await asyncio.gather(
            *(journal.begin_order(token, key, quote_id=1, estimate_id=2) for key, token in jobs)
        )
        assert len(journal._writers) <= 2
        # The pool has a connection left for everything else, at once.
        async with asyncio.timeout(2.0):
            async with journal._pool.acquire():
                pass
            assert (await journal.get("keep-0")) is not None
    finally:
        await asyncio.wait_for(journal.close(), 5.0)  # kept connections go back first


async def test_a_kept_connection_the_server_dropped_is_replaced(pg_schema: str) -> None:
    journal = await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema, max_size=3)
    try:
        key, token = await claimed(journal, "dropped")
        await journal.begin_order(token, key, quote_id=1, estimate_id=2)
        (kept,) = journal._writers
        async with journal._pool.acquire() as other:
            await other.execute("SELECT pg_terminate_backend($1)", kept.get_server_pid())
        for _ in range(200):  # the client learns it when the socket closes
            if postgres_journal._closed(kept):
                break
            await asyncio.sleep(0.01)
        assert postgres_journal._closed(kept)
        record = await journal.withdraw_order(token, key)
        assert record.state is JobState.QUOTED
        assert kept not in journal._writers
    finally:
        await journal.close()


async def test_a_single_connection_pool_keeps_none(journal: PostgresJournal) -> None:
    key, token = await claimed(journal, "single")
    await journal.begin_order(token, key, quote_id=1, estimate_id=2)
    assert journal._writers == []
    async with asyncio.timeout(2.0), journal._pool.acquire():
        pass
