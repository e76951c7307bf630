"""Workers in one process against a sandbox, sharing a PostgreSQL journal and Redis limiters.

Each worker has its own clients and its own ``RedisOrderLimiter`` objects, as separate
processes would: they share only Redis and PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from shipping_async.bulk.journal import JobState
from shipping_async.bulk.worker import Worker
from shipping_async.clock import ScaledClock
from shipping_async.sandbox import SandboxServer
from shipping_async.scaleout.accounts import AccountClients, AccountConfigError
from shipping_async.scaleout.factory import open_limiter
from shipping_async.scaleout.postgres_journal import PostgresJournal

from .conftest import POSTGRES_DSN, REDIS_URL
from .support import make_job

SPEED = 100.0  # the API's 60 s window lasts 0.6 s
LEASE = 60.0  # seconds of the scaled clock: 0.6 s real


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(speed=SPEED, token="tok-north", seed=3) as server:
        yield server


@pytest.fixture
async def journal(pg_schema: str) -> AsyncIterator[PostgresJournal]:
    journal = await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema, clock=ScaledClock(SPEED))
    yield journal
    await journal.close()


def clients_for(sandbox: SandboxServer, prefix: str) -> AccountClients:
    clock = ScaledClock(SPEED)
    return AccountClients(
        lambda account: open_limiter(
            f"{REDIS_URL}?prefix={prefix}", account=account, clock=clock, lease=LEASE
        ),
        environ={"SHIPPING_ACCESS_TOKEN__NORTH": sandbox.token},
        base_url=sandbox.base_url,
        clock=clock,
    )


async def test_two_workers_ship_every_job_once_within_the_shared_budget(
    sandbox: SandboxServer, journal: PostgresJournal, prefix: str, redis_client: object
) -> None:
    await journal.add([make_job(f"n-{index:02d}", "north") for index in range(30)])
    everyone = [clients_for(sandbox, prefix) for _ in range(2)]
    workers = [
        Worker(journal, clients.client, concurrency=10, lease=LEASE, clock=ScaledClock(SPEED))
        for clients in everyone
    ]

    async def work(worker: Worker) -> list[str]:
        return [result.key async for result in worker.run()]

    try:
        finished = await asyncio.wait_for(asyncio.gather(*(work(w) for w in workers)), 20)
    finally:
        for clients in everyone:
            await clients.aclose()
    assert sorted(finished[0] + finished[1]) == [f"n-{index:02d}" for index in range(30)]
    assert all(finished), "both workers took part"
    counts = await journal.counts()
    assert counts[JobState.DONE] == 30
    orders = sandbox.control.requests(method="POST", path="/orders")
    assert [record.status for record in orders].count(429) == 0
    created = Counter(record.customer_reference for record in orders if record.order_id)
    assert set(created.values()) == {1}
    assert len(created) == 30


async def test_an_account_without_a_token_is_named(sandbox: SandboxServer, prefix: str) -> None:
    clients = clients_for(sandbox, prefix)
    with pytest.raises(AccountConfigError, match="SHIPPING_ACCESS_TOKEN__SOUTH"):
        clients.check(["north", "south"])


async def test_an_account_without_a_token_is_left_to_others_and_the_rest_ships(
    sandbox: SandboxServer,
    journal: PostgresJournal,
    prefix: str,
    redis_client: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await journal.add([make_job("n-1", "north"), make_job("s-1", "south")])
    clients = clients_for(sandbox, prefix)  # a token for north only
    worker = Worker(journal, clients.client, lease=LEASE, clock=ScaledClock(SPEED))
    try:
        finished = [result.key async for result in worker.run()]
    finally:
        await clients.aclose()
    assert finished == ["n-1"]
    assert "SHIPPING_ACCESS_TOKEN__SOUTH" in caplog.text
    assert (await journal.get("s-1")).state is JobState.PENDING  # type: ignore[union-attr]


async def test_a_new_worker_with_an_in_process_limiter_waits_for_the_window_others_filled(
    sandbox: SandboxServer, journal: PostgresJournal
) -> None:
    def memory_clients() -> AccountClients:
        clock = ScaledClock(SPEED)
        return AccountClients(
            lambda account: open_limiter("memory", account=account, clock=clock),
            environ={"SHIPPING_ACCESS_TOKEN__NORTH": sandbox.token},
            base_url=sandbox.base_url,
            clock=clock,
        )

    for batch in range(2):  # the second worker is a new process: its limiter starts empty
        await journal.add([make_job(f"n-{batch}-{index:02d}", "north") for index in range(20)])
        clients = memory_clients()
        try:
            worker = Worker(journal, clients.client, lease=LEASE, clock=ScaledClock(SPEED))
            finished = await asyncio.wait_for(_keys(worker), 20)
        finally:
            await clients.aclose()
        assert len(finished) == 20

    orders = sandbox.control.requests(method="POST", path="/orders")
    assert Counter(record.status for record in orders) == {201: 40}


async def _keys(worker: Worker) -> list[str]:
    return [result.key async for result in worker.run()]
