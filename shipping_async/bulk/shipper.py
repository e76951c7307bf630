"""BulkShipper: fans a stream of jobs out through the pipeline, bounded, resumable, stoppable."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from pathlib import Path

from shipping_async.bulk._gate import OrderGate
from shipping_async.bulk._recent_orders import hold_recent_orders
from shipping_async.bulk.choice import EstimateChooser, cheapest
from shipping_async.bulk.jobs import InvalidJob, ShipmentJob
from shipping_async.bulk.journal import JobRecord, JobState, Journal, LeaseLostError
from shipping_async.bulk.pipeline import JobPipeline, ShippingClient, Stopped
from shipping_async.bulk.results import ShipmentResult, Stage
from shipping_async.bulk.sqlite_journal import SQLiteJournal

__all__ = ["BulkShipper", "RunProgress"]

_log = logging.getLogger(__name__)


class RunProgress:
    """Live counts of a run, for a progress display: jobs per state and order times."""

    def __init__(self) -> None:
        self.states: Counter[JobState] = Counter()  # jobs of this run by current state
        self.reached: Counter[JobState] = Counter()  # jobs that reached each state this run
        self.resumed = 0  # finished by an earlier run, only reported
        self.invalid = 0
        self.failed_unordered = 0  # failed before an order existed
        self.order_times: deque[float] = deque(maxlen=256)  # monotonic, ORDERED moves
        self._where: dict[str, JobState] = {}

    def observe(self, record: JobRecord, now: float) -> None:
        """Count one committed state change."""
        before = self._where.get(record.key)
        if before is not None:
            self.states[before] -= 1
        self.states[record.state] += 1
        self.reached[record.state] += 1
        if record.state is JobState.ORDERED and before is JobState.ORDERING:
            self.order_times.append(now)
        if record.state is JobState.FAILED and record.order_id is None:
            self.failed_unordered += 1
        if record.finished:
            self._where.pop(record.key, None)
        else:
            self._where[record.key] = record.state

    def forget(self, key: str) -> None:
        """A job left this run unfinished (stopped)."""
        before = self._where.pop(key, None)
        if before is not None:
            self.states[before] -= 1

    @property
    def in_flight(self) -> int:
        """Jobs claimed by this run and not finished."""
        return len(self._where)


class BulkShipper:
    """Ships a batch: ``async for result in shipper.run(jobs)``, one result per job.

    Example::

        async with AsyncShippingClient() as client:
            shipper = BulkShipper(client, journal="batch.journal", choose=cheapest("USD"))
            async for result in shipper.run(read_jobs("shipments.csv")):
                print(result.key, result.status, result.order_id)

    ``jobs`` (an iterable or async iterable of :class:`ShipmentJob`, or
    :class:`InvalidJob` for rows that did not parse) is read lazily: at most
    ``concurrency`` jobs are in flight. ``journal`` is a :class:`Journal`, a path for a
    :class:`SQLiteJournal` (opened and closed by :meth:`run`), or ``None`` for an
    in-memory one that cannot be resumed. Jobs the journal already holds continue from
    their state; finished ones are reported with ``resumed=True``; ``retry_failed``
    retries failed jobs marked retryable (an ordered one is never ordered again).
    ``lease`` is in real seconds at any clock speed.
    """

    def __init__(
        self,
        client: ShippingClient,
        *,
        journal: Journal | str | Path | None = None,
        choose: EstimateChooser | None = None,
        concurrency: int = 64,
        quote_ahead: int | None = None,
        estimate_validity: float | None = None,
        retry_failed: bool = False,
        lease: float = 300.0,
        worker_id: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency: must be >= 1, got {concurrency}")
        self._client = client
        self._journal_option = journal
        self._choose = choose or cheapest()
        self._concurrency = concurrency
        # One rate window's worth of quoted jobs waits for order slots, no more: an
        # estimate waits at most about one window before it is ordered.
        self._quote_ahead = quote_ahead or client.order_limiter.limit
        self._validity = estimate_validity
        self._retry_failed = retry_failed
        # Real seconds, turned into the clock's: a lease guards against real failures.
        self._lease = client.clock.from_real(lease)
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.progress = RunProgress()
        self._stop = asyncio.Event()
        self._remembered = False  # the journal's recent orders are held by the limiter

    def stop(self) -> None:
        """Stop gracefully: read no more jobs, start no more orders, finish what is ordered.

        Jobs that had not started their order are left in the journal as they are and
        continue on the next run.
        """
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop.is_set()

    async def run(
        self, jobs: Iterable[ShipmentJob | InvalidJob] | AsyncIterable[ShipmentJob | InvalidJob]
    ) -> AsyncIterator[ShipmentResult]:
        """Ship every job; yields one result per job as it finishes."""
        journal, owned = await self._open_journal()
        if not self._remembered:  # what a previous process sent still fills the window
            self._remembered = True
            await hold_recent_orders(journal, self._client.order_limiter, self._client.clock)
        results: asyncio.Queue[ShipmentResult | None] = asyncio.Queue(self._concurrency)
        clock = self._client.clock
        pipeline = JobPipeline(
            self._client,
            journal,
            choose=self._choose,
            gate=OrderGate(self._client.order_limiter, clock, self._stop),
            quote_ahead=self._quote_ahead,
            lease=self._lease,
            estimate_validity=self._validity,
            observe=lambda record: self.progress.observe(record, clock.monotonic()),
        )
        run = _Run(self, journal, pipeline, results)
        try:
            async with asyncio.TaskGroup() as tasks:
                feeder = tasks.create_task(run.feed(_aiter(jobs)))
                heartbeat = tasks.create_task(run.heartbeat())
                while (result := await results.get()) is not None:
                    yield result
                await feeder
                heartbeat.cancel()
        finally:
            if owned:
                await journal.close()

    async def _open_journal(self) -> tuple[Journal, bool]:
        option = self._journal_option
        if option is None or isinstance(option, str | Path):
            path = ":memory:" if option is None else option
            return await SQLiteJournal.open(path, clock=self._client.clock), True
        return option, False


class _Run:
    """The state of one :meth:`BulkShipper.run`: the feeder, the workers, the heartbeat."""

    def __init__(
        self,
        shipper: BulkShipper,
        journal: Journal,
        pipeline: JobPipeline,
        results: asyncio.Queue[ShipmentResult | None],
    ) -> None:
        self.shipper = shipper
        self.journal = journal
        self.pipeline = pipeline
        self.results = results
        self.slots = asyncio.Semaphore(shipper._concurrency)
        self.active: dict[str, str] = {}  # key -> claim token of the job's one task
        self.chunk = max(1, min(32, shipper._concurrency))

    async def feed(self, jobs: AsyncIterator[ShipmentJob | InvalidJob]) -> None:
        try:
            async with asyncio.TaskGroup() as workers:
                buffer: list[ShipmentJob | InvalidJob] = []
                async for item in jobs:
                    await self.slots.acquire()
                    if self.shipper.stopping:
                        self.slots.release()
                        break
                    buffer.append(item)
                    if len(buffer) >= self.chunk or self.slots.locked():
                        await self._start(buffer, workers)
                        buffer = []
                    if self.shipper.stopping:
                        break
                if buffer and not self.shipper.stopping:
                    await self._start(buffer, workers)
                elif buffer:
                    for _ in buffer:
                        self.slots.release()
        finally:
            await self.results.put(None)

    async def _start(
        self, items: list[ShipmentJob | InvalidJob], workers: asyncio.TaskGroup
    ) -> None:
        jobs = [item for item in items if isinstance(item, ShipmentJob)]
        records = {record.key: record for record in await self.journal.add(jobs)}
        wanted: list[str] = []
        for item in items:
            if isinstance(item, InvalidJob):
                self.shipper.progress.invalid += 1
                await self._report(ShipmentResult.invalid(item.key, item.row, item.error))
                continue
            record = records[item.key]
            if item.key in wanted or item.key in self.active:
                error = f"key {item.key!r} appears twice in the input; each job needs its own"
                await self._report(ShipmentResult.invalid(item.key, None, error))
            elif record.job != item:
                error = f"key {item.key!r} is already used by a different job in the journal"
                await self._report(ShipmentResult.invalid(item.key, None, error))
            elif record.finished and not self._retrying(record):
                self.shipper.progress.resumed += 1
                await self._report(ShipmentResult.from_record(record, resumed=True))
            else:
                wanted.append(item.key)
        claimed = await self.journal.claim(
            self.shipper.worker_id,
            lease=self.shipper._lease,
            limit=len(wanted),
            keys=wanted,
            retry_failed=self.shipper._retry_failed,
            exclude=list(self.active),
        )
        taken = {record.key for record in claimed}
        for key in wanted:
            if key not in taken:  # leased elsewhere, or found mid-order and now UNKNOWN
                await self._report_unclaimed(key)
        for record in claimed:
            assert record.claim_token is not None
            self.active[record.key] = record.claim_token
            self.shipper.progress.observe(record, self.shipper._client.clock.monotonic())
            workers.create_task(self._work(record))

    def _retrying(self, record: JobRecord) -> bool:
        return self.shipper._retry_failed and record.state is JobState.FAILED and record.retryable

    async def _report(self, result: ShipmentResult) -> None:
        self.slots.release()
        await self.results.put(result)

    async def _report_unclaimed(self, key: str) -> None:
        record = await self.journal.get(key)
        if record is not None and record.finished:
            await self._report(ShipmentResult.from_record(record, resumed=True))
        else:
            _log.warning("job %s is being worked on by another worker; skipped", key)
            self.slots.release()

    async def _work(self, record: JobRecord) -> None:
        key = record.key
        assert record.claim_token is not None
        try:
            final = await self.pipeline.ship(record)
        except Stopped:
            self.shipper.progress.forget(key)
            await self.journal.release({key: record.claim_token})
            self.slots.release()
            return
        except LeaseLostError as exc:
            _log.info("job %s: claim went stale, stopped working on it (%s)", key, exc)
            self.shipper.progress.forget(key)
            self.slots.release()
            return
        except Exception as exc:  # a bug in one job must not stop the batch
            _log.exception("job %s failed unexpectedly", key)
            settled = await self._crashed(key, record.claim_token, exc)
            if settled is None:
                self.slots.release()
                return
            final = settled
        finally:
            self.active.pop(key, None)
        await self._report(ShipmentResult.from_record(final))

    async def _crashed(self, key: str, token: str, exc: Exception) -> JobRecord | None:
        current = await self.journal.get(key)
        if current is None or current.claim_token != token:
            self.shipper.progress.forget(key)
            return None
        error = f"unexpected {type(exc).__name__}: {exc}"
        if current.state is JobState.ORDERING:  # the order may have been sent
            state, stage = JobState.UNKNOWN, Stage.ORDER
        else:
            state, stage = JobState.FAILED, _STAGE_AFTER.get(current.state, Stage.QUOTE)
        try:
            final = await self.journal.finish(
                token, key, state, error=error, error_stage=stage.value
            )
        except LeaseLostError:
            self.shipper.progress.forget(key)
            return None
        self.shipper.progress.observe(final, self.shipper._client.clock.monotonic())
        return final

    async def heartbeat(self) -> None:
        clock = self.shipper._client.clock
        while True:
            await clock.sleep(self.shipper._lease / 3)
            claims = dict(self.active)
            if not claims:
                continue
            try:
                held = await self.journal.renew(claims, lease=self.shipper._lease)
            except Exception as exc:  # the next beat tries again; the lease has slack
                _log.warning("could not renew leases (%s)", exc)
                continue
            for key in claims.keys() - held:
                if self.active.get(key) == claims[key]:
                    _log.info("job %s: lease taken by a later claim; its task will stop", key)


_STAGE_AFTER = {
    JobState.PENDING: Stage.QUOTE,
    JobState.QUOTED: Stage.ORDER,
    JobState.ORDERED: Stage.WAYBILL,
    JobState.WAYBILLED: Stage.PICKUP,
}


async def _aiter(
    jobs: Iterable[ShipmentJob | InvalidJob] | AsyncIterable[ShipmentJob | InvalidJob],
) -> AsyncIterator[ShipmentJob | InvalidJob]:
    if isinstance(jobs, AsyncIterable):
        async for item in jobs:
            yield item
    else:
        for item in jobs:
            yield item
