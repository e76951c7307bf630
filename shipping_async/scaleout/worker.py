"""A worker of a shared journal: claims jobs of every account and ships them until none is left.

Any number of workers, on any number of hosts, run :meth:`Worker.run` against one
PostgreSQL journal. Each account gets a *lane* in every worker: its client (token,
order limiter), a :class:`~shipping_async.bulk.pipeline.JobPipeline` and its order gate.
A lane claims as many jobs as it has free places (``SELECT ... FOR UPDATE SKIP LOCKED``
in the journal), renews their leases while it works, and polls for more until its
account has no unfinished job left - including jobs leased by other workers, because a
worker that dies leaves its jobs to be taken over once their lease runs out.

Accounts do not slow each other: each lane has its own places, limiter and gate.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from shipping_async.bulk._gate import OrderGate
from shipping_async.bulk._recent_orders import hold_recent_orders
from shipping_async.bulk.choice import EstimateChooser, cheapest
from shipping_async.bulk.journal import JobRecord, JobState, Journal, LeaseLostError
from shipping_async.bulk.pipeline import JobPipeline, ShippingClient, Stopped
from shipping_async.bulk.results import ShipmentResult, Stage
from shipping_async.bulk.shipper import RunProgress
from shipping_async.clock import Clock, SystemClock
from shipping_async.errors import ShippingError

__all__ = ["SharedJournal", "Worker"]

_log = logging.getLogger(__name__)

_STAGE_OF_STATE = {
    JobState.PENDING: Stage.QUOTE,
    JobState.QUOTED: Stage.ORDER,
    JobState.ORDERED: Stage.WAYBILL,
    JobState.WAYBILLED: Stage.PICKUP,
}


class SharedJournal(Journal, Protocol):
    """A journal many workers share; :class:`PostgresJournal` is one."""

    async def accounts_with_work(self, *, retry_failed: bool = False) -> list[str]:
        """Accounts that have jobs not finished yet (leased or not)."""
        ...


class Worker:
    """Works on the journal's jobs, every account, until none is left or :meth:`stop`.

    Example::

        clients = AccountClients(lambda account: open_limiter(redis_url, account=account))
        worker = Worker(journal, clients.client, lease=60)
        async for result in worker.run():
            print(result.key, result.status)

    ``lease`` (real seconds, whatever the speed of ``clock``: it guards against real
    failures, not protocol time) is how long a claimed job stays this worker's without
    renewal: after a crash, others take its jobs over that much later. Leases are renewed
    every third of it; the journal is polled for jobs every tenth. ``concurrency`` bounds
    the jobs in flight per account.
    """

    def __init__(
        self,
        journal: SharedJournal,
        client_for: Callable[[str], ShippingClient],
        *,
        concurrency: int = 32,
        lease: float = 60.0,
        choose: EstimateChooser | None = None,
        estimate_validity: float | None = None,
        retry_failed: bool = False,
        worker_id: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency: must be >= 1, got {concurrency}")
        if lease <= 0:
            raise ValueError(f"lease: must be > 0 seconds, got {lease}")
        self.journal = journal
        self.client_for = client_for
        self.concurrency = concurrency
        self.clock: Clock = clock or SystemClock()
        # Journals and sleeps take the lease in seconds of the clock.
        self.lease = self.clock.from_real(lease)
        self.poll = self.lease / 10
        self.choose = choose or cheapest()
        self.estimate_validity = estimate_validity
        self.retry_failed = retry_failed
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.progress = RunProgress()
        self.stop_event = asyncio.Event()
        self.remembered: set[str] = set()  # accounts whose limiter holds the recent orders

    def stop(self) -> None:
        """Stop gracefully: claim nothing more, start no more orders, finish what is sent."""
        self.stop_event.set()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self.stop_event.is_set()

    async def run(self) -> AsyncIterator[ShipmentResult]:
        """Work until no account has unfinished jobs; yields each job this worker finished."""
        results: asyncio.Queue[ShipmentResult | None] = asyncio.Queue()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._supervise(tasks, results))
            while (result := await results.get()) is not None:
                yield result

    async def accounts_with_work(self) -> list[str]:
        """Accounts whose jobs are not all finished, in the journal."""
        return await self.journal.accounts_with_work(retry_failed=self.retry_failed)

    async def _supervise(
        self, tasks: asyncio.TaskGroup, results: asyncio.Queue[ShipmentResult | None]
    ) -> None:
        """Keep a lane per account with work; end once every lane has ended."""
        lanes: dict[str, asyncio.Task[None]] = {}
        unusable: set[str] = set()  # no client (no token): left to other workers
        try:
            while not self.stopping:
                accounts = [a for a in await self.accounts_with_work() if a not in unusable]
                for account in accounts:
                    if account in lanes and not lanes[account].done():
                        continue
                    try:
                        lane = _Lane(self, account, results)
                    except (ShippingError, ValueError) as exc:  # no token, bad base URL
                        _log.error(
                            "account %r: %s; its jobs are left to other workers", account, exc
                        )
                        unusable.add(account)
                        continue
                    lanes[account] = tasks.create_task(lane.run())
                running = [lane for lane in lanes.values() if not lane.done()]
                if not running and not set(accounts) - unusable:
                    break
                # Look again when a lane ends, at the next poll (accounts added by a
                # bulk run meanwhile), or on stop.
                await _first(
                    asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED),
                    self.clock.sleep(self.poll),
                    self.stop_event.wait(),
                )
            await asyncio.gather(*lanes.values(), return_exceptions=True)
        finally:
            await results.put(None)


class _Lane:
    """One account's work in one worker: its client, pipeline and gate, its claimed jobs."""

    def __init__(
        self, worker: Worker, account: str, results: asyncio.Queue[ShipmentResult | None]
    ) -> None:
        self.worker = worker
        self.journal = worker.journal
        self.account = account
        self.client = worker.client_for(account)
        self.clock = self.client.clock
        self.results = results
        self.places = asyncio.Semaphore(worker.concurrency)
        self.freed = asyncio.Event()
        self.active: dict[str, str] = {}  # key -> claim token of the job's one task
        limiter = self.client.order_limiter
        gate = OrderGate(limiter, self.clock, worker.stop_event)
        attach_gate = getattr(limiter, "attach_gate", None)
        if attach_gate is not None:  # a shared limiter fetching permits ahead for the gate
            attach_gate(gate)
        self.pipeline = JobPipeline(
            self.client,
            worker.journal,
            choose=worker.choose,
            gate=gate,
            quote_ahead=self.client.order_limiter.limit,
            lease=worker.lease,
            estimate_validity=worker.estimate_validity,
            observe=lambda record: worker.progress.observe(record, self.clock.monotonic()),
        )

    async def run(self) -> None:
        """Claim, ship and renew until the account has no unfinished job or the worker stops."""
        worker = self.worker
        if self.account not in worker.remembered:  # a previous process's orders still count
            worker.remembered.add(self.account)
            await hold_recent_orders(
                self.journal, self.client.order_limiter, self.clock, account=self.account
            )
        heartbeat = asyncio.get_running_loop().create_task(self._heartbeat())
        try:
            async with asyncio.TaskGroup() as jobs:
                while not worker.stopping:
                    free = await self._free_places()
                    claimed = await self.journal.claim(
                        worker.worker_id,
                        lease=worker.lease,
                        limit=free,
                        account=self.account,
                        retry_failed=worker.retry_failed,
                        exclude=list(self.active),  # one task per job in this process
                    )
                    for _ in range(free - len(claimed)):
                        self.places.release()
                    for record in claimed:
                        assert record.claim_token is not None
                        self.active[record.key] = record.claim_token
                        worker.progress.observe(record, self.clock.monotonic())
                        jobs.create_task(self._work(record))
                    if len(claimed) == free:
                        continue  # there may be more at once
                    if not self.active and self.account not in await worker.accounts_with_work():
                        break  # every job finished, here or by other workers
                    # Jobs leased by others come free only when their lease runs out.
                    self.freed.clear()
                    await _first(
                        self.clock.sleep(worker.poll), self.freed.wait(), worker.stop_event.wait()
                    )
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)

    async def _free_places(self) -> int:
        """Wait for one free place, then take every other free one."""
        await self.places.acquire()
        free = 1
        while not self.places.locked():
            await self.places.acquire()
            free += 1
        return free

    async def _work(self, record: JobRecord) -> None:
        key, worker = record.key, self.worker
        assert record.claim_token is not None
        claim = {key: record.claim_token}
        try:
            final = await self.pipeline.ship(record)
        except Stopped:
            worker.progress.forget(key)
            await self.journal.release(claim)
            return
        except LeaseLostError as exc:
            _log.info("job %s: claim went stale, stopped working on it (%s)", key, exc)
            worker.progress.forget(key)
            return
        except Exception as exc:  # a bug in one job must not stop the others
            _log.exception("job %s failed unexpectedly", key)
            settled = await self._crashed(key, record.claim_token, exc)
            if settled is None:
                return
            final = settled
        finally:
            self.active.pop(key, None)
            self.places.release()
            self.freed.set()
        await self.results.put(ShipmentResult.from_record(final))

    async def _crashed(self, key: str, token: str, exc: Exception) -> JobRecord | None:
        current = await self.journal.get(key)
        if current is None or current.claim_token != token:
            _log.info("job %s: claim went stale; its state is left to the new claim", key)
            self.worker.progress.forget(key)
            return None
        if current.state is JobState.ORDERING:  # the order may have been sent
            state, stage = JobState.UNKNOWN, Stage.ORDER
        else:
            state, stage = JobState.FAILED, _STAGE_OF_STATE.get(current.state, Stage.QUOTE)
        try:
            final = await self.journal.finish(
                token,
                key,
                state,
                error=f"unexpected {type(exc).__name__}: {exc}",
                error_stage=stage.value,
            )
        except LeaseLostError:
            self.worker.progress.forget(key)
            return None
        self.worker.progress.observe(final, self.clock.monotonic())
        return final

    async def _heartbeat(self) -> None:
        worker = self.worker
        while True:
            await self.clock.sleep(worker.lease / 3)
            claims = dict(self.active)
            if not claims:
                continue
            try:
                held = await self.journal.renew(claims, lease=worker.lease)
            except Exception as exc:  # the next beat tries again; the lease has slack
                _log.warning("account %r: could not renew leases (%s)", self.account, exc)
                continue
            for key in claims.keys() - held:
                if self.active.get(key) == claims[key]:
                    _log.info("job %s: lease taken by a later claim; its task will stop", key)


async def _first(*awaitables: Awaitable[object]) -> None:
    """Wait until the first of ``awaitables`` finishes; cancel the others."""
    tasks = [asyncio.ensure_future(item) for item in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
