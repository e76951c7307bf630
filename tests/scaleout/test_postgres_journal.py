"""The PostgreSQL journal: claims with leases, takeover, the order intent, reconciliation.

Every test works in a schema of its own on the machine's PostgreSQL. Leases are a few
tenths of a second (they run on the database's clock, which is real).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import asyncpg
import pytest

from shipping_async.bulk.journal import (
    JobState,
    Journal,
    JournalStateError,
    LeaseLostError,
)
from shipping_async.scaleout._pg_schema import LATEST_VERSION, migrate
from shipping_async.scaleout.postgres_journal import PostgresJournal

from .conftest import POSTGRES_DSN
from .support import make_job

SHORT = 0.3  # a lease that runs out during the test
LONG = 30.0


@pytest.fixture
async def journal(pg_schema: str) -> AsyncIterator[PostgresJournal]:
    journal = await PostgresJournal.open(POSTGRES_DSN, schema=pg_schema)
    yield journal
    await journal.close()


async def add(journal: PostgresJournal, count: int, account: str = "") -> list[str]:
    keys = [f"{account or 'job'}-{index:03d}" for index in range(count)]
    await journal.add([make_job(key, account) for key in keys])
    return keys


async def claim(journal: PostgresJournal, worker: str, **options: Any) -> dict[str, str]:
    """Claim (long leases, one job unless told); each claimed key's claim token."""
    options = {"lease": LONG, "limit": 1, **options}
    return {r.key: r.claim_token for r in await journal.claim(worker, **options) if r.claim_token}


async def quoted(journal: PostgresJournal, token: str, key: str) -> None:
    await journal.record(token, key, JobState.QUOTED, quote_id=7, estimate_id=70)


async def test_implements_the_journal_protocol(journal: PostgresJournal) -> None:
    assert isinstance(journal, Journal)


async def test_schema_is_created_once_and_versioned(pg_schema: str) -> None:
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        assert await migrate(connection, pg_schema) == list(range(1, LATEST_VERSION + 1))
        assert await migrate(connection, pg_schema) == []
        versions = await connection.fetch(
            f'SELECT version FROM "{pg_schema}".schema_version ORDER BY version'
        )
    finally:
        await connection.close()
    assert [row["version"] for row in versions] == list(range(1, LATEST_VERSION + 1))


async def test_workers_starting_together_migrate_once(pg_schema: str) -> None:
    journals = await asyncio.gather(
        *(PostgresJournal.open(POSTGRES_DSN, schema=pg_schema) for _ in range(4))
    )
    for journal in journals:
        await journal.close()


async def test_adding_a_known_key_keeps_its_progress(journal: PostgresJournal) -> None:
    (key,) = await add(journal, 1)
    t = await claim(journal, "w1")
    await quoted(journal, t[key], key)
    (again,) = await journal.add([make_job(key)])
    assert again.state is JobState.QUOTED
    assert again.quote_id == 7


async def test_facts_round_trip_through_their_columns(journal: PostgresJournal) -> None:
    (key,) = await add(journal, 1)
    t = (await claim(journal, "w1"))[key]
    await quoted(journal, t, key)
    await journal.begin_order(t, key, quote_id=7, estimate_id=70)
    await journal.record(
        t, key, JobState.ORDERED, order_id=501, cost=Decimal("12.50"), currency="USD"
    )
    record = await journal.record(t, key, JobState.WAYBILLED, waybills=["WB-1", None])
    assert (record.order_id, record.cost, record.waybills) == (
        501,
        Decimal("12.50"),
        ["WB-1", None],
    )
    assert record.job == make_job(key)


async def test_concurrent_claims_never_hand_out_a_job_twice(journal: PostgresJournal) -> None:
    keys = await add(journal, 60)

    async def worker(name: str) -> list[str]:
        mine: list[str] = []
        while batch := await journal.claim(name, lease=LONG, limit=3):
            mine.extend(record.key for record in batch)
        return mine

    claimed = await asyncio.gather(*(worker(f"w{index}") for index in range(5)))
    counts = Counter(key for keys_of_worker in claimed for key in keys_of_worker)
    assert sorted(counts) == keys
    assert set(counts.values()) == {1}


async def test_claims_come_in_the_order_jobs_were_added(journal: PostgresJournal) -> None:
    keys = await add(journal, 5)
    records = await journal.claim("w1", lease=LONG, limit=3)
    assert [record.key for record in records] == keys[:3]
    assert all(record.lease_owner == "w1" and record.attempts == 1 for record in records)


async def test_a_dead_workers_job_is_taken_over_from_its_step_after_the_lease(
    journal: PostgresJournal,
) -> None:
    (key,) = await add(journal, 1)
    dead = (await claim(journal, "dead", lease=SHORT))[key]
    await quoted(journal, dead, key)
    assert await journal.claim("alive", lease=LONG, limit=1) == []  # still leased
    await asyncio.sleep(SHORT + 0.05)
    (record,) = await journal.claim("alive", lease=LONG, limit=1)
    assert (record.state, record.quote_id, record.attempts) == (JobState.QUOTED, 7, 2)
    assert record.claim_token is not None
    with pytest.raises(LeaseLostError):
        await journal.begin_order(dead, key, quote_id=7, estimate_id=70)
    await journal.begin_order(record.claim_token, key, quote_id=7, estimate_id=70)


async def test_a_stale_claim_of_the_same_worker_can_write_nothing(
    journal: PostgresJournal,
) -> None:
    (key,) = await add(journal, 1)
    stale = (await claim(journal, "w1", lease=SHORT))[key]
    await asyncio.sleep(SHORT + 0.05)
    current = (await claim(journal, "w1"))[key]  # the same worker claims it again
    assert current != stale
    for write in (
        journal.record(stale, key, JobState.QUOTED, quote_id=7),
        journal.begin_order(stale, key, quote_id=7, estimate_id=70),
        journal.finish(stale, key, JobState.FAILED, error="stale"),
    ):
        with pytest.raises(LeaseLostError):
            await write
    assert await journal.renew({key: stale}, lease=LONG) == set()
    await quoted(journal, current, key)
    await journal.begin_order(current, key, quote_id=7, estimate_id=70)
    withdrawn = await journal.withdraw_order(current, key)
    assert withdrawn.state is JobState.QUOTED


async def test_a_lapsed_lease_nobody_claimed_is_taken_back_and_excluded_keys_stay_out(
    journal: PostgresJournal,
) -> None:
    first, second = await add(journal, 2)
    tokens = await claim(journal, "w1", lease=SHORT, limit=2)
    await asyncio.sleep(SHORT + 0.05)
    assert await journal.renew({first: tokens[first]}, lease=LONG) == {first}
    assert await journal.claim("w1", lease=LONG, limit=2, exclude=[second]) == []
    (other,) = await journal.claim("w2", lease=LONG, limit=2)
    assert other.key == second


async def test_renewing_keeps_a_job_and_fails_once_it_is_lost(journal: PostgresJournal) -> None:
    first, second = await add(journal, 2)
    t = await claim(journal, "w1", lease=SHORT, limit=2)
    await asyncio.sleep(SHORT / 2)
    assert await journal.renew({first: t[first]}, lease=LONG) == {first}
    await asyncio.sleep(SHORT / 2 + 0.05)
    (taken,) = await journal.claim("w2", lease=LONG, limit=2)
    assert taken.key == second
    assert await journal.renew(t, lease=LONG) == {first}


async def test_order_intent_is_recorded_by_the_write_that_claims_the_order_step(
    journal: PostgresJournal,
) -> None:
    (key,) = await add(journal, 1)
    t = (await claim(journal, "w1"))[key]
    await quoted(journal, t, key)
    outcomes = await asyncio.gather(
        *(journal.begin_order(t, key, quote_id=7, estimate_id=70) for _ in range(3)),
        return_exceptions=True,
    )
    winners = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(o, JournalStateError) for o in outcomes if o not in winners)
    assert winners[0].state is JobState.ORDERING
    assert winners[0].order_intent_at is not None


async def test_order_intents_of_the_last_window_are_listed_per_account(
    journal: PostgresJournal,
) -> None:
    keys = await add(journal, 2, "a") + await add(journal, 1, "b")
    t = await claim(journal, "w1", limit=3)
    for key in keys:
        await quoted(journal, t[key], key)
        await journal.begin_order(t[key], key, quote_id=7, estimate_id=70)
    await journal.finish(t[keys[0]], keys[0], JobState.UNKNOWN)  # counts: it may have arrived

    ages = await journal.order_intent_ages(within=60)
    assert len(ages) == 3
    assert all(0 <= age < 5 for age in ages)
    assert len(await journal.order_intent_ages(within=60, account="a")) == 2
    assert len(await journal.order_intent_ages(within=60, account="b")) == 1
    await asyncio.sleep(0.05)
    assert await journal.order_intent_ages(within=0.01) == []


async def test_begin_order_from_pending_records_the_quote_with_the_intent(
    journal: PostgresJournal,
) -> None:
    # A job whose order follows its quote at once: one write for both (none for QUOTED).
    (key,) = await add(journal, 1)
    t = (await claim(journal, "w1"))[key]
    quote: Any = {"carrier": "Sandbox Freight", "cost": Decimal("12.50"), "currency": "USD"}
    intent = await journal.begin_order(t, key, quote_id=7, estimate_id=70, quote=quote)
    facts = (intent.state, intent.quote_id, intent.estimate_id, intent.carrier, intent.cost)
    assert facts == (JobState.ORDERING, 7, 70, "Sandbox Freight", Decimal("12.50"))
    assert await journal.get(key) == intent
    withdrawn = await journal.withdraw_order(t, key)  # a 429: the quote stays recorded
    assert (withdrawn.state, withdrawn.quote_id, withdrawn.currency) == (
        JobState.QUOTED,
        7,
        "USD",
    )
    assert await journal.get(key) == withdrawn


async def test_begin_order_only_before_the_order(journal: PostgresJournal) -> None:
    (key,) = await add(journal, 1)
    t = (await claim(journal, "w1"))[key]
    await journal.begin_order(t, key, quote_id=7, estimate_id=70)
    with pytest.raises(JournalStateError, match="ordering needs pending or quoted"):
        await journal.begin_order(t, key, quote_id=7, estimate_id=70)
    await journal.record(t, key, JobState.ORDERED, order_id=1)
    with pytest.raises(JournalStateError, match="needs pending or quoted"):
        await journal.begin_order(t, key, quote_id=7, estimate_id=70)


async def test_unknown_order_outcome_is_never_resent_but_listed_for_reconciliation(
    journal: PostgresJournal,
) -> None:
    first, second = await add(journal, 2)
    dead = (await claim(journal, "dead", lease=SHORT))[first]
    await quoted(journal, dead, first)
    await journal.begin_order(dead, first, quote_id=7, estimate_id=70)
    await asyncio.sleep(SHORT + 0.05)  # ... the worker died with the order on the wire
    claimed = await journal.claim("alive", lease=LONG, limit=10)
    assert [record.key for record in claimed] == [second]
    (unknown,) = await journal.needs_reconciliation()
    assert (unknown.key, unknown.state, unknown.error_stage) == (first, JobState.UNKNOWN, "order")
    assert await journal.claim("other", lease=LONG, limit=10, retry_failed=True) == []


@pytest.mark.parametrize(
    ("order_id", "state"),
    [
        pytest.param(901, JobState.ORDERED, id="order-exists"),
        pytest.param(None, JobState.PENDING, id="no-order"),
    ],
)
async def test_reconcile_settles_an_unknown_job(
    journal: PostgresJournal, order_id: int | None, state: JobState
) -> None:
    (key,) = await add(journal, 1)
    t = (await claim(journal, "w1"))[key]
    await quoted(journal, t, key)
    await journal.begin_order(t, key, quote_id=7, estimate_id=70)
    await journal.finish(t, key, JobState.UNKNOWN, error="timeout", error_stage="order")
    record = await journal.reconcile(key, order_id=order_id)
    assert (record.state, record.order_id, record.error) == (state, order_id, None)
    assert await journal.needs_reconciliation() == []
    with pytest.raises(JournalStateError, match="nothing to reconcile"):
        await journal.reconcile(key, order_id=order_id)


async def test_retryable_failure_resumes_after_its_last_success(journal: PostgresJournal) -> None:
    (key,) = await add(journal, 1)
    t = (await claim(journal, "w1"))[key]
    await journal.record(t, key, JobState.ORDERED, order_id=42)
    await journal.finish(
        t, key, JobState.FAILED, error="503", error_stage="waybill", retryable=True
    )
    assert await journal.claim("w2", lease=LONG, limit=1) == []
    (record,) = await journal.claim("w2", lease=LONG, limit=1, retry_failed=True)
    assert (record.state, record.order_id, record.error) == (JobState.ORDERED, 42, None)


async def test_finished_job_leaves_its_lease(journal: PostgresJournal) -> None:
    (key,) = await add(journal, 1)
    t = (await claim(journal, "w1"))[key]
    record = await journal.finish(t, key, JobState.DONE)
    assert (record.lease_owner, record.lease_until, record.claim_token) == (None, None, None)
    with pytest.raises(LeaseLostError):
        await journal.record(t, key, JobState.QUOTED)


async def test_claims_and_counts_per_account(journal: PostgresJournal) -> None:
    await add(journal, 3, account="north")
    await add(journal, 2, account="south")
    claimed = await journal.claim("w1", lease=LONG, limit=10, account="south")
    assert {record.account for record in claimed} == {"south"}
    for record in claimed:
        assert record.claim_token is not None
        await journal.finish(record.claim_token, record.key, JobState.DONE)
    by_account = await journal.counts_by_account()
    assert by_account["north"][JobState.PENDING] == 3
    assert by_account["south"][JobState.DONE] == 2
    assert (await journal.counts())[JobState.PENDING] == 3
    assert await journal.accounts_with_work() == ["north"]


async def test_released_jobs_are_claimable_at_once(journal: PostgresJournal) -> None:
    await add(journal, 2)
    await journal.release(await claim(journal, "w1", limit=2))
    assert len(await journal.claim("w2", lease=LONG, limit=2)) == 2


async def test_records_stream_every_job_in_order(journal: PostgresJournal) -> None:
    keys = await add(journal, 12)
    assert [record.key async for record in journal.records()] == keys
    assert [r async for r in journal.records(states=[JobState.DONE])] == []
