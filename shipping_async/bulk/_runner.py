"""THE run engine: a lane per account; claim -> ship -> settle; stop; fed by a batch or draining.

:class:`Runner` is what ``bulk``, ``worker`` and :class:`~shipping_async.bulk.BulkShipper`
run (the latter two, :class:`~shipping_async.bulk.worker.Worker` and ``BulkShipper``, are
façades over it). Its seams, for whoever builds on it:

- **The journal protocol** (:class:`~shipping_async.bulk.journal.Journal`): every job is
  claimed before it is worked on and every write names the claim's token, on SQLite as on
  PostgreSQL. A task whose claim went stale stops quietly (logged at INFO with the key).
- **A job source.** :meth:`Runner.drain` claims the workable jobs of every account that
  has work until none is left (a worker): one journal call claims for many accounts, at
  most twice ``max_in_flight`` jobs held at once, one at a time round the accounts, and
  only once a quarter of that budget is free; the accounts are listed again every poll.
  :meth:`Runner.run` takes a ``feed`` coroutine instead, which adds jobs to the journal
  and hands their keys over with :meth:`Runner.want` (a batch, a queue); the runner
  claims exactly those and ends once the feed has returned and every wanted job is
  settled.
- **Per-job results** are yielded as each job finishes.
- :meth:`Runner.stop` returns at once: nothing more is claimed, no new order starts, and
  what was sent finishes; jobs not started are released untouched.

Each account gets a *lane*: its client (token, order limiter), a
:class:`~shipping_async.bulk.pipeline.JobPipeline` and its order gate, and ``concurrency``
places. One task per job: a lane never claims a job the runner is still working on. One
heartbeat renews every lease of the runner in one journal call (see
:mod:`shipping_async.bulk._leases`); it is a watched side task.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from shipping_async.bulk._gate import OrderGate
from shipping_async.bulk._leases import Claims, settle_crash
from shipping_async.bulk._outage import steady
from shipping_async.bulk._places import Places, Signal
from shipping_async.bulk._recent_orders import hold_recent_orders
from shipping_async.bulk.choice import EstimateChooser, cheapest
from shipping_async.bulk.journal import (
    JobRecord,
    Journal,
    JournalError,
    LeaseLostError,
)
from shipping_async.bulk.pipeline import JobPipeline, ShippingClient, Stopped
from shipping_async.bulk.progress import RunProgress
from shipping_async.bulk.results import ShipmentResult
from shipping_async.clock import Clock
from shipping_async.errors import ShippingError

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "DrainableJournal", "Runner", "new_worker_id"]

_log = logging.getLogger("shipping_async.bulk.runner")

#: Jobs doing requests at once in a worker, across accounts: enough to keep one core busy
#: with the API's answers taking tens of milliseconds, few enough that none waits long.
DEFAULT_MAX_IN_FLIGHT = 64

#: ``Runner.run``'s job source: given the runner, adds jobs and hands them over.
Feed = Callable[["Runner"], Awaitable[None]]


@runtime_checkable
class DrainableJournal(Journal, Protocol):
    """A journal :meth:`Runner.drain` can work through: it lists the accounts with work."""

    async def accounts_with_work(self, *, retry_failed: bool = False) -> list[str]:
        """Accounts that have jobs not finished yet (leased or not)."""
        ...


def new_worker_id() -> str:
    """A worker id unique per process and run: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Runner:
    """Claims, ships and settles jobs of ``journal``, one lane per account.

    ``client_for(account)`` gives each lane's client; ``one_lane=True`` runs every
    account in one lane (one client and limiter for all, as :class:`BulkShipper` does).
    ``lease`` is in real seconds at any clock speed: it guards against real failures.
    ``concurrency`` bounds the jobs in flight per lane (and, for a fed run, the jobs
    handed over and not yet settled). ``max_in_flight`` bounds the jobs doing requests at
    once across every lane (first come, first served): a job takes its place once its
    turn to order has come, before it is quoted, so no estimate waits for a place.
    """

    def __init__(
        self,
        journal: Journal,
        client_for: Callable[[str], ShippingClient],
        *,
        clock: Clock,
        concurrency: int = 32,
        lease: float = 60.0,
        choose: EstimateChooser | None = None,
        estimate_validity: float | None = None,
        retry_failed: bool = False,
        worker_id: str | None = None,
        quote_ahead: int | None = None,
        one_lane: bool = False,
        max_in_flight: int | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency: must be >= 1, got {concurrency}")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight: must be >= 1, got {max_in_flight}")
        if lease <= 0:
            raise ValueError(f"lease: must be > 0 seconds, got {lease}")
        # Connection losses are waited out (see _outage): every operation of the run
        # pauses while the store is away, and no new order starts.
        self.journal = steady(journal)
        self.client_for = client_for
        self.clock = clock
        self.concurrency = concurrency
        self.lease = clock.from_real(lease)  # journals and sleeps take the clock's seconds
        self.poll = self.lease / 10
        self.choose = choose or cheapest()
        self.estimate_validity = estimate_validity
        self.retry_failed = retry_failed
        self.worker_id = worker_id or new_worker_id()
        self.quote_ahead = quote_ahead
        self.one_lane = one_lane
        #: Set by :meth:`stop`; what waits for it among other things listens to it.
        self.stop_event = Signal()
        #: The places of jobs doing requests, shared by every lane (``None``: no bound).
        self.work_places = Places(max_in_flight, self.stop_event) if max_in_flight else None
        self.progress = RunProgress()
        self.claims = Claims(self.journal, clock, self.lease)
        #: Jobs this run left unfinished (stopped, claimed elsewhere), by key: why.
        self.unfinished: dict[str, str] = {}
        self._results: asyncio.Queue[ShipmentResult | None] = asyncio.Queue(concurrency)
        self._lanes: dict[str, _Lane] = {}
        #: Lanes whose limiter holds the journal's recent orders (done once per limiter).
        self.remembered: set[str] = set()
        self._slots = Places(concurrency, self.stop_event)
        self._fed: set[str] = set()  # handed over by the feed, not settled yet
        self._fed_run = False  # run(feed), not drain()
        self._feeding = False  # the feed has not returned yet
        self._tasks: asyncio.TaskGroup | None = None
        #: A drain claims at most this many jobs at once, across accounts (``None``: each
        #: account up to ``concurrency``): twice the places, so that a job is ready as
        #: soon as a place frees, and no more, so that memory and leases stay small.
        self.claim_budget = 2 * max_in_flight if max_in_flight else None
        self._running: set[asyncio.Task[None]] = set()  # a drain's job tasks
        self._room = asyncio.Event()  # a drain's job settled: room to claim
        self._turn = 0  # where the next drain claim starts round the accounts

    # -- control ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop gracefully (returns at once): claim nothing more, start no more orders,
        finish what is sent; jobs not started stay in the journal as they are."""
        self.stop_event.set()
        for lane in self._lanes.values():
            lane.wake.set()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self.stop_event.is_set()

    # -- job sources -----------------------------------------------------------------------

    def drain(self) -> AsyncIterator[ShipmentResult]:
        """Work until no account of the journal has unfinished jobs; yields each result."""
        return self._run(self._supervise)

    def run(self, feed: Feed) -> AsyncIterator[ShipmentResult]:
        """Work on the jobs ``feed`` hands over (:meth:`want`); yields each result."""
        return self._run(functools.partial(self._fed_by, feed), fed=True)

    async def enter(self) -> bool:
        """For a feed: wait for room for one more job (``concurrency`` unsettled at most);
        ``False`` (no room taken) once the run stops."""
        if self.stopping:
            return False
        if self._slots.take_now(1):  # room now: no coroutine to wait in
            return True
        return await self._slots.take(unless_stopped=True)

    async def report(self, result: ShipmentResult) -> None:
        """For a feed: a job settled without being worked on (invalid, finished before)."""
        self._slots.give()
        await self._results.put(result)

    def leave(self) -> None:
        """For a feed: give back the room :meth:`enter` took, for a job not handed over."""
        self._slots.give()

    @property
    def full(self) -> bool:
        """For a feed: no room for another job right now."""
        return self._slots.locked()

    def handed(self, key: str) -> bool:
        """For a feed: ``key`` was handed over and is not settled yet."""
        return key in self._fed

    def want(self, records: Sequence[JobRecord]) -> None:
        """For a feed: work on these jobs (each had :meth:`enter`)."""
        assert self._tasks is not None, "want() is for the feed of a running run()"
        for record in records:
            self._fed.add(record.key)
            self._lane("" if self.one_lane else record.account).want(record.key)

    # -- internals -------------------------------------------------------------------------

    async def _run(
        self, source: Callable[[], Awaitable[None]], *, fed: bool = False
    ) -> AsyncIterator[ShipmentResult]:
        """The run's results as they come (one async generator between the results and
        whoever reads them: each result passes every layer)."""
        if fed:
            self._fed_run = self._feeding = True
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            heartbeat = tasks.create_task(self._watched("lease renewal", self.claims.heartbeat()))
            # Not watched: an outage longer than allowed ends the run with its error.
            store = tasks.create_task(self.journal.watch())
            main = tasks.create_task(self._until_done(source()))
            while (result := await self._results.get()) is not None:
                yield result
            await main
            heartbeat.cancel()
            store.cancel()

    async def _until_done(self, source: Awaitable[None]) -> None:
        try:
            await source
            await asyncio.gather(*(lane.task for lane in self._lanes.values() if lane.task))
        except BaseException:
            # Failed or cancelled: the task group ends the run, and nobody may read the
            # results any more - waiting for room in a full queue would hang it.
            if not self._results.full():
                self._results.put_nowait(None)
            raise
        await self._results.put(None)

    async def _watched(self, name: str, side: Awaitable[None]) -> None:
        """A side task that must not fail silently: a failure is logged and stops the run."""
        try:
            await side
        except asyncio.CancelledError:
            raise
        except JournalError as exc:  # the store failed: one line, the run stops
            _log.error("%s failed (%s); stopping the run", name, exc)
            _log.debug("%s failed", name, exc_info=True)
            self.stop()
        except Exception:
            _log.exception("%s failed; stopping the run", name)
            self.stop()

    async def _fed_by(self, feed: Feed) -> None:
        try:
            await feed(self)
        finally:
            self._feeding = False
            for lane in self._lanes.values():
                lane.wake.set()

    async def _supervise(self) -> None:
        """Drain: claim for every account with work, in one journal call for many jobs and
        accounts, within the claim budget and fairly between accounts; return once no
        account has unfinished jobs and no job of this run is being worked on."""
        journal = self.journal
        assert isinstance(journal, DrainableJournal), "drain() needs accounts_with_work()"
        unusable: set[str] = set()  # no client (no token): left to other workers
        accounts: list[str] = []  # with work, usable
        dry: set[str] = set()  # short at their last claim: not asked again until listed again
        listed_at: float | None = None
        while not self.stopping:
            if listed_at is None or self.clock.monotonic() - listed_at >= self.poll:
                listed_at = self.clock.monotonic()
                listed = await journal.accounts_with_work(retry_failed=self.retry_failed)
                dry.clear()
                accounts = []
                for account in listed:
                    if account in unusable:
                        continue
                    try:
                        await self._drain_lane(account)
                    except (ShippingError, ValueError) as exc:  # no token, bad base URL
                        _log.error(
                            "account %r: %s; its jobs are left to other workers", account, exc
                        )
                        unusable.add(account)
                        continue
                    accounts.append(account)
                if not accounts and not self._running:
                    break
            shares = self._shares([account for account in accounts if account not in dry])
            if shares:
                await self._claim_shares(shares, dry)
                continue
            if not self._running and self._room.is_set():
                listed_at = None  # the last jobs settled: look at once what is left
                self._room.clear()
                continue
            # Claim again when jobs settled (room), at the next listing (others' leases
            # run out, accounts added by a bulk run), or on stop: no polling in between.
            self._room.clear()
            listing = self.clock.sleep(max(self.poll - (self.clock.monotonic() - listed_at), 0.0))
            await _first(self._room.wait(), listing, self.stop_event.wait())
        while self._running:  # stopping or drained: what was started finishes
            await asyncio.wait(set(self._running))

    def _shares(self, accounts: list[str]) -> dict[str, int]:
        """How many jobs to claim now for each of ``accounts``: one at a time round the
        accounts, from where the last claim stopped, within each lane's ``concurrency``
        and the claim budget. Nothing until a quarter of the budget is free (or nothing
        is held): claims come in batches, not one per settled job."""
        held = len(self.claims)
        if self.claim_budget is None:
            room = len(accounts) * self.concurrency
        else:
            room = self.claim_budget - held
            if held and room < max(1, self.claim_budget // 4):
                return {}
        if not accounts or room <= 0:
            return {}
        start = self._turn % len(accounts)
        order = accounts[start:] + accounts[:start]
        caps = {name: self.concurrency - len(self._lanes[name].active) for name in order}
        shares: dict[str, int] = {}
        last = start
        while room > 0:
            given = False
            for index, name in enumerate(order):
                if room <= 0:
                    break
                if shares.get(name, 0) < caps[name]:
                    shares[name] = shares.get(name, 0) + 1
                    room -= 1
                    given = True
                    last = start + index
            if not given:
                break
        self._turn = last + 1
        return shares

    async def _claim_shares(self, shares: dict[str, int], dry: set[str]) -> None:
        """One claim for many accounts; each job claimed starts at once in its lane."""
        asked_at = self.clock.monotonic()
        claimed = await self.journal.claim(
            self.worker_id,
            lease=self.lease,
            limit=sum(shares.values()),
            accounts=shares,
            retry_failed=self.retry_failed,
            exclude=self.claims.keys(),  # one task per job in this process
        )
        got: dict[str, int] = {}
        for record in claimed:
            got[record.account] = got.get(record.account, 0) + 1
        dry.update(name for name, share in shares.items() if got.get(name, 0) < share)
        assert self._tasks is not None
        for record in claimed:
            lane = self._lanes[record.account]
            await lane.places.take()  # free: the share was within the lane's room
            lane.active.add(record.key)
            self.claims.hold(record, asked_at=asked_at)
            self.progress.observe(record, lane.client.clock.monotonic())
            task = self._tasks.create_task(lane._work(record))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _drain_lane(self, name: str) -> _Lane:
        """The lane of account ``name`` for a drain (jobs are started in it by the
        claims of :meth:`_supervise`; it runs no task of its own)."""
        lane = self._lanes.get(name)
        if lane is None:
            lane = _Lane(self, name, None)
            self._lanes[name] = lane
            await lane.remember()
        return lane

    def _lane(self, name: str) -> _Lane:
        """The running lane ``name``, started if needed."""
        lane = self._lanes.get(name)
        if lane is None or lane.done:
            lane = _Lane(self, name, lane)
            self._lanes[name] = lane
            assert self._tasks is not None
            lane.task = self._tasks.create_task(lane.run())
        return lane

    async def _settled(self, key: str, result: ShipmentResult | None, why: str = "") -> None:
        """A job's task ended: its result, or (``None``) left unfinished for ``why``."""
        self.claims.drop(key)
        self._room.set()
        fed = key in self._fed
        self._fed.discard(key)
        if result is None:
            self.unfinished[key] = why
            self.progress.forget(key)
            if fed:
                self._slots.give()
            return
        self.unfinished.pop(key, None)
        if fed:
            self._slots.give()
        await self._results.put(result)

    async def _unclaimed(self, key: str) -> None:
        """A wanted job the claim did not return: finished meanwhile, or someone else's."""
        record = await self.journal.get(key)
        if record is not None and record.finished and not self._retrying(record):
            self.progress.resumed += 1
            self._fed.discard(key)
            await self.report(ShipmentResult.from_record(record, resumed=True))
        else:
            _log.warning("job %s is being worked on by another worker; left to it", key)
            await self._settled(key, None, "worked on by another worker")

    def _retrying(self, record: JobRecord) -> bool:
        return self.retry_failed and record.retryable and record.state.value == "failed"


class _Lane:
    """One account's work in one runner: its client, pipeline and gate, its claimed jobs."""

    def __init__(self, runner: Runner, name: str, before: _Lane | None) -> None:
        self.runner = runner
        self.name = name
        self.client = runner.client_for(name)
        self.places = Places(runner.concurrency)
        self.wake = asyncio.Event()
        self.active: set[str] = set()
        self.wanted: deque[str] = before.wanted if before is not None else deque()
        self.task: asyncio.Task[None] | None = None
        limiter = self.client.order_limiter
        clock = self.client.clock
        gate = OrderGate(limiter, clock, runner.stop_event, runner.journal.up)
        self.pipeline = JobPipeline(
            self.client,
            runner.journal,
            choose=runner.choose,
            gate=gate,
            # One rate window's worth of quoted jobs waits for order slots, no more: an
            # estimate waits at most about one window before it is ordered.
            quote_ahead=runner.quote_ahead or limiter.limit,
            lease=runner.lease,
            estimate_validity=runner.estimate_validity,
            observe=lambda record: runner.progress.observe(record, clock.monotonic()),
            leases=runner.claims,
            work_places=runner.work_places,
        )

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()

    def want(self, key: str) -> None:
        self.wanted.append(key)
        self.wake.set()

    async def run(self) -> None:
        """Claim, ship and settle what the feed hands over until the lane has nothing
        left or the runner stops (a fed run; a drain starts jobs in its lanes itself)."""
        runner = self.runner
        await self.remember()
        async with asyncio.TaskGroup() as jobs:
            while not runner.stopping:
                self.wake.clear()
                if self.wanted:
                    free = await self._free_places(len(self.wanted))
                    asked_at = self.client.clock.monotonic()
                    claimed = await self._claim(free)
                    for _ in range(free - len(claimed)):
                        self.places.give()
                    for record in claimed:
                        self.active.add(record.key)
                        runner.claims.hold(record, asked_at=asked_at)
                        runner.progress.observe(record, self.client.clock.monotonic())
                        jobs.create_task(self._work(record))
                    if self.wanted and not self.places.locked():
                        continue  # more handed over, and room for it
                if self._finished():
                    break
                await self.wake.wait()  # a job handed over or settled, the feed's end, stop
        if not runner.stopping:
            return
        for key in self.wanted:  # handed over, never started
            await runner._settled(key, None, "stopped")
        self.wanted.clear()

    async def remember(self) -> None:
        """Hold the permits of a previous process's recent orders (once per limiter)."""
        runner = self.runner
        if self.name not in runner.remembered:  # a previous process's orders still count
            runner.remembered.add(self.name)
            account = None if runner.one_lane else self.name
            await hold_recent_orders(
                runner.journal, self.client.order_limiter, self.client.clock, account=account
            )

    async def _free_places(self, wanted: int) -> int:
        """Wait for one free place, then take the free ones up to ``wanted`` in all."""
        taken = self.places.take_now(wanted)
        if taken:
            return taken
        await self.places.take()
        return 1 + self.places.take_now(wanted - 1)

    async def _claim(self, free: int) -> list[JobRecord]:
        runner = self.runner
        if runner.stopping:
            return []
        keys = [self.wanted.popleft() for _ in range(min(free, len(self.wanted)))]
        if not keys:
            return []
        claimed = await runner.journal.claim(
            runner.worker_id,
            lease=runner.lease,
            limit=len(keys),
            keys=keys,
            retry_failed=runner.retry_failed,
            exclude=list(self.active),
        )
        taken = {record.key for record in claimed}
        for key in keys:
            if key not in taken:  # leased elsewhere, or found mid-order and now UNKNOWN
                await runner._unclaimed(key)
        return claimed

    def _finished(self) -> bool:
        return not self.active and not self.runner._feeding and not self.wanted

    async def _work(self, record: JobRecord) -> None:
        key, runner = record.key, self.runner
        result: ShipmentResult | None = None
        why = ""
        try:
            final = await self.pipeline.ship(record)
        except Stopped:
            assert record.claim_token is not None
            await runner.journal.release({key: record.claim_token})
            why = "stopped"
        except LeaseLostError as exc:
            _log.info("job %s: its claim went stale; left to the current claim (%s)", key, exc)
            why = "claimed again elsewhere"
        except JournalError:
            # The store failed (away longer than allowed, a full or read-only file): not
            # this job's fault; the run ends and the CLI says how to resume.
            raise
        except Exception as exc:  # a bug in one job must not stop the others
            _log.exception("job %s failed unexpectedly", key)
            settled = await settle_crash(runner.journal, record, exc)
            if settled is None:
                why = "claimed again elsewhere"
            else:
                runner.progress.observe(settled, self.client.clock.monotonic())
                result = ShipmentResult.from_record(settled)
        else:
            result = ShipmentResult.from_record(final)
        finally:
            self.active.discard(key)
            self.places.give()
            if self.wanted or not self.active:  # a key waits for this place, or maybe done
                self.wake.set()
        await runner._settled(key, result, why)


async def _first(*awaitables: Awaitable[object] | None) -> None:
    """Wait until the first of ``awaitables`` finishes; cancel the others."""
    tasks = [asyncio.ensure_future(item) for item in awaitables if item is not None]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
