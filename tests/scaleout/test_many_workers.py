"""Many worker processes, one sandbox process, the machine's Redis and PostgreSQL.

The sandbox runs 100 times faster than real time (0.6 s windows); every worker runs
``shipping-async worker`` against one journal schema and one Redis prefix of the test's
own. What the sandbox's request log shows is what the API would have seen.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from shipping_async.bulk.journal import JobState
from shipping_async.scaleout.postgres_journal import PostgresJournal

from .conftest import POSTGRES_DSN, REDIS_URL, PrivateRedis
from .processes import (
    LIMIT,
    Sandbox,
    Workers,
    bound,
    busiest_window,
    created,
    order_span,
    start_sandbox,
)
from .support import make_job


def journal_url(schema: str) -> str:
    return f"{POSTGRES_DSN}?schema={schema}"


def north(sandbox: Sandbox) -> dict[str, str]:
    """The environment that gives account ``north`` the sandbox's token."""
    return {"SHIPPING_ACCESS_TOKEN__NORTH": sandbox.token, "SHIPPING_BASE_URL": sandbox.base_url}


@pytest.fixture
def crew(
    sandbox: Sandbox, pg_schema: str, prefix: str, tmp_path: Path, redis_client: object
) -> Iterator[Workers]:
    """Workers of account north on this test's journal schema and Redis prefix."""
    workers = Workers(
        journal_url(pg_schema), f"{REDIS_URL}?prefix={prefix}", north(sandbox), tmp_path
    )
    yield workers
    workers.stop()


@pytest.fixture
async def private_crew(
    sandbox: Sandbox, pg_schema: str, prefix: str, tmp_path: Path, private_redis: PrivateRedis
) -> AsyncIterator[Workers]:
    """Workers of account north on this test's journal schema and a Redis of its own (its
    command counts are the test's, and the test may stop it)."""
    await private_redis.wait_ready()
    workers = Workers(
        journal_url(pg_schema), f"{private_redis.url}?prefix={prefix}", north(sandbox), tmp_path
    )
    yield workers
    workers.stop()


def assert_each_ordered_once(orders: list[dict[str, Any]], keys: list[str]) -> None:
    """Every job ordered exactly once, never a 429, never more than the limit a window."""
    assert created(orders) == dict.fromkeys(keys, 1)
    assert [record["status"] for record in orders].count(429) == 0
    assert busiest_window(orders) <= LIMIT


async def script_calls(url: str) -> int:
    """Lua script calls a Redis has run since it started (INFO commandstats)."""
    client = aioredis.Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return sum(value["calls"] for name, value in stats.items() if "eval" in name)


async def enqueue(journal: PostgresJournal, account: str, count: int) -> list[str]:
    keys = [f"{account}-{index:03d}" for index in range(count)]
    await journal.add([make_job(key, account) for key in keys])
    return keys


async def test_three_workers_share_one_budget_without_a_429_near_the_bound(
    sandbox: Sandbox, journal: PostgresJournal, private_crew: Workers, private_redis: PrivateRedis
) -> None:
    crew = private_crew
    keys = await enqueue(journal, "north", 120)
    crew.start(3)
    try:
        assert await crew.wait(within=25) == [0, 0, 0], crew.logs()
    finally:
        crew.stop()
    orders = await sandbox.orders()
    assert_each_ordered_once(orders, keys)
    span = order_span(orders)
    # Every permit taken, fetched ahead and given back through Redis, whichever worker
    # sent it: at most one script call per order (issue 18). The workers wait in line
    # for the budget rather than all waking for every permit that frees.
    scripts = await script_calls(private_redis.url)
    assert scripts <= len(keys), f"{scripts} script calls for {len(keys)} orders"
    assert bound(120) <= span <= 1.15 * bound(120), f"{span:.1f} s for a bound of {bound(120)}"
    assert (await journal.counts())[JobState.DONE] == 120


async def test_a_killed_workers_jobs_are_finished_by_the_others_each_ordered_once(
    sandbox: Sandbox, journal: PostgresJournal, crew: Workers
) -> None:
    keys = await enqueue(journal, "north", 80)
    crew.extra = ("--concurrency", "20")
    crew.start(3)
    await sandbox.wait_for_orders(25)  # mid-batch
    crew.kill(0)
    codes = await crew.wait(within=25)
    # The killed worker's jobs were claimed again (attempts > 1) and finished, except
    # those it had on the wire: their outcome is unknown, listed, never re-sent, and
    # the workers exit with 1 to say so.
    records = [record async for record in journal.records()]
    assert any(record.attempts > 1 for record in records)
    orders = await sandbox.orders()
    unknown = await journal.needs_reconciliation()
    assert codes[1:] == ([1, 1] if unknown else [0, 0]), crew.logs()
    for record in unknown:  # the operator looks them up (here: in the sandbox's log)
        found = [o["order_id"] for o in orders if o["customer_reference"] == record.key]
        await journal.reconcile(record.key, order_id=next((i for i in found if i), None))
    if unknown:
        crew.start(1)
        assert (await crew.wait(within=15))[-1] == 0, crew.logs()
    assert (await journal.counts())[JobState.DONE] == 80
    assert_each_ordered_once(await sandbox.orders(), keys)


async def test_two_accounts_each_get_their_own_budget(
    journal: PostgresJournal, pg_schema: str, prefix: str, tmp_path: Path, redis_client: object
) -> None:
    north, south = start_sandbox("tok-north"), start_sandbox("tok-south")
    try:
        await enqueue(journal, "north", 80)
        await enqueue(journal, "south", 80)
        workers = Workers(
            journal_url(pg_schema),
            f"{REDIS_URL}?prefix={prefix}",
            {
                "SHIPPING_ACCESS_TOKEN__NORTH": north.token,
                "SHIPPING_BASE_URL__NORTH": north.base_url,
                "SHIPPING_ACCESS_TOKEN__SOUTH": south.token,
                "SHIPPING_BASE_URL__SOUTH": south.base_url,
            },
            tmp_path,
        )
        workers.start(2)
        try:
            assert await workers.wait(within=25) == [0, 0], workers.logs()
        finally:
            workers.stop()
        for sandbox, name in ((north, "north"), (south, "south")):
            orders = await sandbox.orders()
            assert_each_ordered_once(orders, [f"{name}-{index:03d}" for index in range(80)])
            # Each account ships at its own full rate: 80 orders in about three windows.
            # Sharing one budget, the two would need seven (bound(160), 2.3 x as long):
            # half-way between the two tells them apart with room for a loaded machine.
            span = order_span(orders)
            assert span <= (bound(80) + bound(160)) / 2, f"{name}: {span:.0f} s"
    finally:
        north.stop()
        south.stop()


async def test_workers_hold_orders_while_redis_is_down_and_go_on_when_it_returns(
    sandbox: Sandbox, journal: PostgresJournal, private_crew: Workers, private_redis: PrivateRedis
) -> None:
    workers = private_crew
    keys = await enqueue(journal, "north", 60)
    workers.start(2)
    try:
        await sandbox.wait_for_orders(10)
        private_redis.stop()
        await asyncio.sleep(0.2)  # requests already holding a permit finish
        during = len(await sandbox.orders())
        await asyncio.sleep(1.0)  # well over a window: nothing may be sent unguarded
        assert len(await sandbox.orders()) == during
        assert "Redis unreachable" in workers.logs()
        private_redis.start()
        restarted = time.monotonic()
        assert await workers.wait(within=25) == [0, 0], workers.logs()
    finally:
        workers.stop()
    assert_each_ordered_once(await sandbox.orders(), keys)
    assert time.monotonic() - restarted < 20


async def test_bulk_enqueues_and_works_while_a_worker_joins(
    sandbox: Sandbox, crew: Workers, tmp_path: Path
) -> None:
    keys = [f"north-{index:03d}" for index in range(50)]
    shipments = tmp_path / "shipments.jsonl"
    shipments.write_bytes(
        b"".join(msgspec.json.encode(make_job(key, "north")) + b"\n" for key in keys)
    )
    results = tmp_path / "results.jsonl"
    crew.start(command=("bulk", str(shipments), "--out", str(results)))
    await sandbox.wait_for_orders(1)  # enqueued, and under way
    crew.start()
    assert await crew.wait(within=25) == [0, 0], crew.logs()
    assert_each_ordered_once(await sandbox.orders(), keys)
    done = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(result["key"] for result in done) == keys  # bulk reports every input job
    assert {result["status"] for result in done} == {"done"}
