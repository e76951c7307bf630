"""A draining worker claims only what its in-flight budget can work soon, fairly between
accounts, in few journal calls (on a manual clock, fake APIs, an in-memory journal)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from shipping_async.bulk.journal import JobRecord, JobState
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.bulk.worker import Worker
from shipping_async.clock import ManualClock
from tests.bulk.fakes import drain, held_accounts, let_go_all, settle

ACCOUNTS = ("a1", "a2", "a3", "a4", "a5")
PER_ACCOUNT = 8
MAX_IN_FLIGHT = 4  # a claim budget of 8


async def leased(journal: SQLiteJournal) -> list[JobRecord]:
    return [record async for record in journal.records() if record.lease_owner is not None]


async def test_claims_stay_within_the_budget_fair_between_accounts_in_few_calls(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    apis, keys = await held_accounts(journal, clock, ACCOUNTS, PER_ACCOUNT)
    claims: list[dict[str, int] | None] = []
    claim = journal.claim

    async def counted(*args: Any, **options: Any) -> list[JobRecord]:
        claims.append(options.get("accounts"))
        return await claim(*args, **options)

    journal.claim = counted  # type: ignore[method-assign]
    worker = Worker(journal, apis.__getitem__, clock=clock, lease=60, max_in_flight=MAX_IN_FLIGHT)
    running, results = drain(worker)
    await settle()
    held = await leased(journal)
    # Twice the places, not every account's jobs (40): memory and leases stay small.
    assert len(held) == 2 * MAX_IN_FLIGHT
    # One at a time round the accounts: every account has jobs claimed, none more than 2.
    per_account = Counter(record.account for record in held)
    assert set(per_account) == set(ACCOUNTS)
    assert max(per_account.values()) <= 2
    # The first claim asked for every account in one call.
    first = claims[0]
    assert first is not None
    assert len(first) == len(ACCOUNTS)

    let_go_all(apis, keys)
    async with asyncio.timeout(10):
        while not running.done():
            await settle()
            assert len(await leased(journal)) <= 2 * MAX_IN_FLIGHT
            clock.advance(1)
    await running
    assert sorted(results) == sorted(keys)
    assert (await journal.counts())[JobState.DONE] == len(keys)
    # Claims come in batches (a quarter of the budget at least), not one per job.
    assert len(claims) <= len(keys) // 2 + 2, claims
