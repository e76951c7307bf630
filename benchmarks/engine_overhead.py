"""The run engine's own CPU per job: the runner and pipeline around an instant API and store.

Run: .venv/bin/python benchmarks/engine_overhead.py [--jobs 4000] [--accounts 50] [--repeat 3]

What ``benchmarks/many_accounts.py`` measures end to end includes the HTTP client, the
journal's store and the sandbox; this script leaves them out, to measure what lies between:
the runner's lanes, claims and leases, the pipeline's stages, the order gate, the outage
wrapper (:class:`~shipping_async.bulk._outage.SteadyJournal`), progress counting and the
results. The API is a fake whose every call yields to the loop once and answers with a
model decoded once; the store is a dict whose every call yields once (both as a real one
does: an answer comes on a later loop turn). The order goes through the SDK's own
``send_with_retries`` (its permit and the order intent's gate), as with the real client.

Rows: ``bulk`` (:class:`~shipping_async.bulk.BulkShipper`, one lane, a batch fed as it is
read) and ``worker`` (:class:`~shipping_async.bulk.worker.Worker` draining ``--accounts``
accounts). ``us/job`` is the process CPU (user + system) per job on uvloop, the best of
``--repeat`` runs; ``tasks/job`` the tasks created per job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Unpack

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shipping_async._retry import Operation, RetryPolicy  # noqa: E402
from shipping_async._send import send_with_retries  # noqa: E402
from shipping_async.bulk.jobs import ShipmentJob  # noqa: E402
from shipping_async.bulk.journal import (  # noqa: E402
    FINISHED_STATES,
    WORKABLE_STATES,
    JobFields,
    JobRecord,
    JobState,
    LeaseLostError,
)
from shipping_async.bulk.shipper import BulkShipper  # noqa: E402
from shipping_async.bulk.worker import Worker  # noqa: E402
from shipping_async.clock import ManualClock  # noqa: E402
from shipping_async.limiter import RollingWindowLimiter  # noqa: E402
from shipping_async.models import (  # noqa: E402
    Order,
    OrderRequest,
    PickupAvailability,
    Quote,
    QuoteRequest,
    ScheduledPickup,
    SchedulePickupRequest,
    decoder,
)
from tests.bulk.support import make_job  # noqa: E402
from tests.resources import support  # noqa: E402


def _decode(type_: Any, body: Any) -> Any:
    return decoder(type_).decode(json.dumps(body))


QUOTE: Quote = _decode(Quote, support.direct_quote())
ORDER: Order = _decode(Order, support.order(id=1001))
SLOTS: list[PickupAvailability] = _decode(list[PickupAvailability], support.pickup_availabilities())
BOOKED: ScheduledPickup = _decode(ScheduledPickup, support.scheduled_pickup())
NO_RETRY = RetryPolicy(max_retries=0)


async def _turn() -> None:
    await asyncio.sleep(0)


class _Quotes:
    async def create(self, request: QuoteRequest, /) -> Quote:
        await _turn()
        return QUOTE

    async def get(self, quote_id: int, /) -> Quote:
        await _turn()
        return QUOTE


class _Orders:
    def __init__(self, api: InstantAPI) -> None:
        self._api = api

    async def create(self, request: OrderRequest, /) -> Order:
        operation = Operation(
            name="create_order",
            method="POST",
            path="/orders",
            customer_reference=request.customer_reference,
        )
        return await send_with_retries(
            self._send,
            operation=operation,
            policy=NO_RETRY,
            clock=self._api.clock,
            limiter=self._api.order_limiter,
        )

    async def _send(self) -> Order:
        await _turn()
        return ORDER

    async def get(self, order_id: int, /) -> Order:
        await _turn()
        return ORDER

    async def create_waybill(self, order_id: int, /) -> Order:
        await _turn()
        return ORDER

    async def pickup_availabilities(self, order_id: int, /) -> list[PickupAvailability]:
        await _turn()
        return SLOTS

    async def schedule_pickup(
        self, order_id: int, request: SchedulePickupRequest, /
    ) -> ScheduledPickup:
        await _turn()
        return BOOKED


class InstantAPI:
    """A :class:`~shipping_async.bulk.pipeline.ShippingClient` answering at once."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.order_limiter = RollingWindowLimiter(1_000_000, 60.0, clock=clock)
        self.quotes = _Quotes()
        self.orders = _Orders(self)


class DictJournal:
    """The journal protocol on a dict, for one process; every call yields once."""

    def __init__(self) -> None:
        self.rows: dict[str, JobRecord] = {}
        self._tokens = 0

    def _held(self, token: str, key: str) -> JobRecord:
        row = self.rows.get(key)
        if row is None or row.claim_token != token:
            raise LeaseLostError(f"job {key!r}: lease lost")
        return row

    async def add(self, jobs: Sequence[ShipmentJob]) -> list[JobRecord]:
        await _turn()
        out = []
        for job in jobs:
            row = self.rows.get(job.key)
            if row is None:
                row = JobRecord(key=job.key, job=job, state=JobState.PENDING, account=job.account)
                self.rows[job.key] = row
            out.append(row)
        return out

    async def claim(
        self,
        worker_id: str,
        *,
        lease: float,
        limit: int,
        keys: Sequence[str] | None = None,
        account: str | None = None,
        retry_failed: bool = False,
        exclude: Collection[str] = (),
        accounts: Mapping[str, int] | None = None,
    ) -> list[JobRecord]:
        await _turn()
        excluded = set(exclude)
        shares = dict(accounts) if accounts is not None else None
        candidates = (self.rows[k] for k in keys) if keys is not None else self.rows.values()
        claimed: list[JobRecord] = []
        for row in candidates:
            if len(claimed) >= limit:
                break
            if row.state not in WORKABLE_STATES or row.claim_token is not None:
                continue
            if row.key in excluded or (account is not None and row.account != account):
                continue
            if shares is not None:
                if shares.get(row.account, 0) <= 0:
                    continue
                shares[row.account] -= 1
            self._tokens += 1
            row = msgspec.structs.replace(
                row, claim_token=f"t{self._tokens}", lease_owner=worker_id
            )
            self.rows[row.key] = row
            claimed.append(row)
        return claimed

    async def renew(self, claims: Mapping[str, str], *, lease: float) -> set[str]:
        await _turn()
        return {key for key, token in claims.items() if self.rows[key].claim_token == token}

    async def record(
        self, token: str, key: str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        await _turn()
        row = msgspec.structs.replace(self._held(token, key), state=state, **fields)
        self.rows[key] = row
        return row

    async def begin_order(
        self,
        token: str,
        key: str,
        *,
        quote_id: int,
        estimate_id: int,
        quote: JobFields | None = None,
    ) -> JobRecord:
        await _turn()
        row = msgspec.structs.replace(
            self._held(token, key),
            state=JobState.ORDERING,
            order_intent_at=datetime.now(UTC),
            **{**(quote or {}), "quote_id": quote_id, "estimate_id": estimate_id},
        )
        self.rows[key] = row
        return row

    def sending(self, key: str) -> None:
        return None

    async def withdraw_order(self, token: str, key: str) -> JobRecord:
        return await self.record(token, key, JobState.QUOTED)

    async def finish(
        self, token: str, key: str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        await _turn()
        row = msgspec.structs.replace(
            self._held(token, key), state=state, claim_token=None, lease_owner=None, **fields
        )
        self.rows[key] = row
        return row

    async def release(self, claims: Mapping[str, str]) -> None:
        await _turn()
        for key, token in claims.items():
            if self.rows[key].claim_token == token:
                self.rows[key] = msgspec.structs.replace(self.rows[key], claim_token=None)

    async def reconcile(
        self, key: str, *, order_id: int | None, evidence: str | None = None
    ) -> JobRecord:
        raise NotImplementedError

    async def get(self, key: str) -> JobRecord | None:
        await _turn()
        return self.rows.get(key)

    async def records(
        self, *, states: Collection[JobState] | None = None
    ) -> AsyncIterator[JobRecord]:
        for row in list(self.rows.values()):
            if states is None or row.state in states:
                yield row

    async def order_intent_ages(self, *, within: float, account: str | None = None) -> list[float]:
        await _turn()
        return []

    async def needs_reconciliation(self) -> list[JobRecord]:
        return []

    async def counts(self) -> dict[JobState, int]:
        counts = dict.fromkeys(JobState, 0)
        for row in self.rows.values():
            counts[row.state] += 1
        return counts

    async def accounts_with_work(self, *, retry_failed: bool = False) -> list[str]:
        await _turn()
        return sorted(
            {row.account for row in self.rows.values() if row.state not in FINISHED_STATES}
        )

    async def close(self) -> None:
        return None


def jobs_of(count: int, accounts: int) -> list[ShipmentJob]:
    job = make_job("T")
    return [
        msgspec.structs.replace(
            job,
            key=f"J-{index:06d}",
            account=f"acct-{index % accounts:03d}" if accounts > 1 else "",
            order=msgspec.structs.replace(job.order, customer_reference=f"J-{index:06d}"),
        )
        for index in range(count)
    ]


class _TaskCount:
    def __init__(self) -> None:
        self.count = 0

    def factory(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        self.count += 1
        return asyncio.Task(coro, loop=loop, **kwargs)


async def run_bulk(jobs: int) -> tuple[float, int, int]:
    clock = ManualClock()
    api = InstantAPI(clock)
    batch = jobs_of(jobs, 1)
    counter = _TaskCount()
    asyncio.get_running_loop().set_task_factory(counter.factory)
    shipper = BulkShipper(api, journal=DictJournal(), lease=300.0)  # type: ignore[arg-type]
    done = 0
    started = time.process_time()
    async for result in shipper.run(batch):
        done += result.status == "done"
    return time.process_time() - started, done, counter.count


async def run_worker(jobs: int, accounts: int) -> tuple[float, int, int]:
    clock = ManualClock()
    apis: dict[str, InstantAPI] = {}
    journal = DictJournal()
    await journal.add(jobs_of(jobs, accounts))

    def client_for(account: str) -> InstantAPI:
        if account not in apis:
            apis[account] = InstantAPI(clock)
        return apis[account]

    counter = _TaskCount()
    asyncio.get_running_loop().set_task_factory(counter.factory)
    worker = Worker(journal, client_for, clock=clock, lease=60.0)  # type: ignore[arg-type]
    done = 0
    started = time.process_time()
    async for result in worker.run():
        done += result.status == "done"
    return time.process_time() - started, done, counter.count


def best(make: Any, repeat: int) -> tuple[float, int, int]:
    import uvloop

    results = []
    for _ in range(repeat):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            results.append(runner.run(make()))
    return min(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="bulk,worker")
    args = parser.parse_args()
    kinds = args.only.split(",")
    print("| run | jobs | done | us/job | tasks/job |")
    print("|---|---:|---:|---:|---:|")
    if "bulk" in kinds:
        cpu, done, tasks = best(lambda: run_bulk(args.jobs), args.repeat)
        print(
            f"| bulk | {args.jobs} | {done} | {cpu * 1e6 / args.jobs:.0f} | "
            f"{tasks / args.jobs:.1f} |"
        )
    if "worker" in kinds:
        cpu, done, tasks = best(lambda: run_worker(args.jobs, args.accounts), args.repeat)
        print(
            f"| worker {args.accounts} accounts | {args.jobs} | {done} | "
            f"{cpu * 1e6 / args.jobs:.0f} | {tasks / args.jobs:.1f} |"
        )


if __name__ == "__main__":
    main()
