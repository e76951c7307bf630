"""Workers ride out a PostgreSQL crash: they pause, say why once, and carry on (issue 12).

Each test crashes a PostgreSQL cluster of its own (``pg_ctl -m immediate stop``) under
real ``shipping-async worker`` processes and a sandbox process at 60x speed (1 s windows).
Exactly-once is judged by the sandbox's request log, never by the journal.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from shipping_async.bulk._outage import SteadyJournal, steady
from shipping_async.bulk.journal import JobState
from shipping_async.clock import ScaledClock
from shipping_async.scaleout.postgres_journal import PostgresJournal

from .conftest import REDIS_URL
from .private_postgres import PrivatePostgres
from .processes import (
    SPEED,
    WINDOW,
    Sandbox,
    Workers,
    bound,
    created,
    order_span,
)
from .test_many_workers import assert_each_ordered_once, enqueue, north

WINDOW_REAL = WINDOW / SPEED  # one rate window, in real seconds


@pytest.fixture
async def journal(private_postgres: PrivatePostgres) -> AsyncIterator[SteadyJournal]:
    """The test's own view of the journal: it waits out the crashes too."""
    store = await PostgresJournal.open(private_postgres.dsn, clock=ScaledClock(SPEED))
    journal = steady(store)
    yield journal
    await journal.close()


@pytest.fixture
def crew(
    sandbox: Sandbox,
    private_postgres: PrivatePostgres,
    prefix: str,
    tmp_path: Path,
    redis_client: object,
) -> Iterator[Workers]:
    workers = Workers(
        private_postgres.dsn, f"{REDIS_URL}?prefix={prefix}", north(sandbox), tmp_path
    )
    yield workers
    workers.stop()


async def crash_for(server: PrivatePostgres, seconds: float) -> float:
    """Crash ``server``, start it again ``seconds`` later; the real seconds it was away
    (its start, with crash recovery, included)."""
    started = time.monotonic()
    await asyncio.to_thread(server.crash)
    await asyncio.sleep(seconds)
    await asyncio.to_thread(server.start)
    return time.monotonic() - started


def assert_no_traceback(workers: Workers) -> None:
    logs = workers.logs()
    assert "Traceback" not in logs, logs
    assert "ExceptionGroup" not in logs, logs


async def settle_unknown(journal: SteadyJournal, sandbox: Sandbox) -> bool:
    """Reconcile the jobs a killed worker left mid-order from the sandbox's log, as an
    operator would; whether there were any."""
    unknown = await journal.needs_reconciliation()
    orders = await sandbox.orders()
    for record in unknown:
        found = [o["order_id"] for o in orders if o["customer_reference"] == record.key]
        await journal.reconcile(record.key, order_id=next((i for i in found if i), None))
    return bool(unknown)


async def test_workers_ride_out_two_postgres_crashes_and_a_killed_worker(
    sandbox: Sandbox,
    journal: SteadyJournal,
    private_postgres: PrivatePostgres,
    crew: Workers,
) -> None:
    keys = await enqueue(journal, "north", 120)
    # Each worker serves a webhook of its own: the orders the killed worker had on the
    # wire end unknown, and the survivors settle them from their order_received evidence
    # (an intent that never left, from the API's silence over its retry horizon).
    crew.webhooks = True
    crew.extra = ("--concurrency", "20", "--resend-unknown-after-silence")
    started = time.monotonic()
    crew.start(3)
    # Every worker has its journal open (then it prints its webhook) before the store
    # crashes: one that opens it during the outage exits 2 at once (documented), and with
    # the first one killed nobody would be left. (Two slow starters did just that once
    # in about fifteen runs, which looked like a stall after the crash.)
    await crew.logged("webhook ")
    await sandbox.wait_for_orders(20)  # mid-batch
    crew.kill(0)
    away = await crash_for(private_postgres, WINDOW_REAL)
    await sandbox.wait_for_orders(60, within=20)
    away += await crash_for(private_postgres, WINDOW_REAL)
    codes = await crew.wait(within=40)
    elapsed = time.monotonic() - started
    assert_no_traceback(crew)
    logs = crew.logs()
    assert "journal store unreachable" in logs, logs  # once each way, as for Redis
    assert "journal store answers again" in logs, logs
    assert codes[1:] == [0, 0], logs
    assert (await journal.counts())[JobState.DONE] == 120
    orders = await sandbox.orders()
    # What the reconcilers did (settled from evidence, or re-sent after silence) says
    # which path a second order of one reference took, should there be one.
    settled = [(r.key, r.evidence) async for r in journal.records() if r.evidence]
    try:
        assert_each_ordered_once(orders, keys)
    except AssertionError as exc:
        twice = [o for o in orders if created(orders)[o["customer_reference"]] > 1]
        raise AssertionError(f"{exc}\ntwice: {twice}\nevidence: {settled}\n{logs}") from None
    span = order_span(orders) / SPEED
    print(
        f"batch {elapsed:.1f} s, orders spanned {span:.1f} s (bound {bound(120) / SPEED:.1f} s, "
        f"store away {away:.1f} s, settled from evidence: {[key for key, _ in settled]})"
    )


async def test_an_outage_longer_than_the_lease_hands_jobs_over_safely(
    sandbox: Sandbox,
    journal: SteadyJournal,
    private_postgres: PrivatePostgres,
    crew: Workers,
) -> None:
    keys = await enqueue(journal, "north", 60)
    crew.lease = 1.0
    crew.start(2)
    await crew.logged(" shipments", out=True)  # both have their journal open
    await sandbox.wait_for_orders(15)
    await crash_for(private_postgres, 3 * crew.lease)  # every lease lapses meanwhile
    codes = await crew.wait(within=30)
    assert_no_traceback(crew)
    # An intent whose answer was written after its lease lapsed is settled by its id;
    # nothing is ever sent twice.
    unknown = await settle_unknown(journal, sandbox)
    assert codes == ([1, 1] if unknown else [0, 0]), crew.logs()
    if unknown:
        crew.start(1)
        assert (await crew.wait(within=20))[-1] == 0, crew.logs()
    assert (await journal.counts())[JobState.DONE] == 60
    assert_each_ordered_once(await sandbox.orders(), keys)


async def test_an_outage_longer_than_max_store_outage_exits_1_and_a_new_worker_finishes(
    sandbox: Sandbox,
    journal: SteadyJournal,
    private_postgres: PrivatePostgres,
    crew: Workers,
) -> None:
    keys = await enqueue(journal, "north", 60)
    crew.extra = ("--max-store-outage", "1")
    crew.start(1)
    await sandbox.wait_for_orders(15)
    await asyncio.to_thread(private_postgres.crash)
    assert await crew.wait(within=15) == [1], crew.logs()
    assert_no_traceback(crew)
    out = (crew.folder / "worker0.out").read_text()
    err = (crew.folder / "worker0.err").read_text()
    assert "longer than --max-store-outage 1" in err, err
    assert f"shipping-async worker --journal {private_postgres.dsn}" in out, out
    await asyncio.to_thread(private_postgres.start)
    crew.extra = ()
    crew.start(1)  # the new worker finishes the batch ...
    finished = (await crew.wait(within=20))[-1]
    # ... but for the orders the first one had on the wire, whose answers it could not
    # write: unknown, never re-sent; the operator reconciles them (here from the sandbox's
    # log; the first worker logged their order ids too).
    if await settle_unknown(journal, sandbox):
        assert finished == 1, crew.logs()
        crew.start(1)
        assert (await crew.wait(within=20))[-1] == 0, crew.logs()
    else:
        assert finished == 0, crew.logs()
    assert (await journal.counts())[JobState.DONE] == 60
    assert_each_ordered_once(await sandbox.orders(), keys)


async def test_a_journal_on_several_hosts_reconnects_to_the_one_that_answers(
    private_postgres: PrivatePostgres, postgres_template: Path
) -> None:
    # Two servers in one DSN, as libpq lists a primary and its standby; the first one
    # here goes away (a failover), and the journal goes on with the second.
    first = PrivatePostgres(postgres_template)
    first.start()
    try:
        hosts = f"127.0.0.1:{first.port},127.0.0.1:{private_postgres.port}"
        dsn = f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"
        store = await PostgresJournal.open(dsn, clock=ScaledClock(SPEED))
        journal = steady(store)
        try:
            await enqueue(journal, "north", 2)
            await asyncio.to_thread(first.crash)
            # The pool's connections to the first server are cut; each reconnects
            # down the list (the second server's own schema, migrated on the way).
            await migrate_second(private_postgres)
            assert sum((await journal.counts()).values()) == 0
            assert not journal.away
        finally:
            await journal.close()
    finally:
        first.cleanup()


async def migrate_second(server: PrivatePostgres) -> None:
    store = await PostgresJournal.open(server.dsn)
    await store.close()
