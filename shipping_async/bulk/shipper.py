"""BulkShipper: a façade that feeds an iterable or async iterable of jobs into the runner.

The jobs are added to the journal a chunk at a time as they are read (at most
``concurrency`` unsettled), then claimed and shipped by :class:`~shipping_async.bulk._runner.Runner`
on one lane with the client's limiter. Jobs the journal already holds go on from their
state; finished ones are reported as resumed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Iterable
from pathlib import Path
from typing import TypeVar

from shipping_async.bulk._runner import Runner, new_worker_id
from shipping_async.bulk.choice import EstimateChooser, cheapest
from shipping_async.bulk.jobs import InvalidJob, ShipmentJob
from shipping_async.bulk.journal import JobRecord, JobState, Journal
from shipping_async.bulk.pipeline import ShippingClient
from shipping_async.bulk.progress import RunProgress
from shipping_async.bulk.results import ShipmentResult
from shipping_async.bulk.sqlite_journal import SQLiteJournal

__all__ = ["BulkShipper", "RunProgress"]

Item = ShipmentJob | InvalidJob


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
        if lease <= 0:
            raise ValueError(f"lease: must be > 0 seconds, got {lease}")
        self._client = client
        self._journal_option = journal
        self._choose = choose or cheapest()
        self._concurrency = concurrency
        self._quote_ahead = quote_ahead
        self._validity = estimate_validity
        self._retry_failed = retry_failed
        self._lease = lease
        self.worker_id = worker_id or new_worker_id()
        self.progress = RunProgress()
        self._stop = asyncio.Event()
        self._runner: Runner | None = None
        self._remembered: set[str] = set()
        self.unfinished: dict[str, str] = {}  # jobs of the last run left unfinished: why

    def stop(self) -> None:
        """Stop gracefully: read no more jobs, start no more orders, finish what is ordered.

        Jobs that had not started their order are left in the journal as they are and
        continue on the next run.
        """
        self._stop.set()
        if self._runner is not None:
            self._runner.stop()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop.is_set()

    async def run(
        self, jobs: Iterable[Item] | AsyncIterable[Item]
    ) -> AsyncIterator[ShipmentResult]:
        """Ship every job; yields one result per job as it finishes."""
        journal, owned = await self._open_journal()
        runner = Runner(
            journal,
            lambda account: self._client,
            clock=self._client.clock,
            concurrency=self._concurrency,
            lease=self._lease,
            choose=self._choose,
            estimate_validity=self._validity,
            retry_failed=self._retry_failed,
            worker_id=self.worker_id,
            quote_ahead=self._quote_ahead,
            one_lane=True,
        )
        runner.progress = self.progress  # one display across runs of this shipper
        runner.remembered = self._remembered  # the client's limiter already holds them
        self._runner = runner
        if self.stopping:
            runner.stop()
        self.unfinished = runner.unfinished
        try:
            async for result in runner.run(_Feed(self, _aiter(jobs)).into):
                yield result
        finally:
            if owned:
                await journal.close()

    async def _open_journal(self) -> tuple[Journal, bool]:
        option = self._journal_option
        if option is None or isinstance(option, str | Path):
            path = ":memory:" if option is None else option
            return await SQLiteJournal.open(path, clock=self._client.clock), True
        return option, False


class _Feed:
    """Reads the jobs, adds what is ready to the journal, hands it over at once.

    A reader task pulls from the source into a small queue; the feed takes what the queue
    holds (a chunk at most) and hands it over without waiting for more, so a job from a
    slow source (a message queue) starts as soon as it arrives. While the source waits
    for its next item, a stop ends the feed at once and the reader is cancelled.
    """

    def __init__(self, shipper: BulkShipper, jobs: AsyncIterator[Item]) -> None:
        self.shipper = shipper
        self.jobs = jobs
        self.chunk = max(1, min(32, shipper._concurrency))

    async def into(self, runner: Runner) -> None:
        ready: asyncio.Queue[Item | _End] = asyncio.Queue(self.chunk)
        reader = asyncio.create_task(self._read(ready))
        try:
            ended = False
            while not ended:
                if ready.empty():  # the source is waiting for its next item
                    got = await _unless_stopped(ready.get(), runner.stop_event)
                    first = None if got is None else got.result()
                else:
                    first = ready.get_nowait()
                if first is None or isinstance(first, _End):
                    break
                batch: list[Item] = [first]
                while len(batch) < self.chunk and not ready.empty():
                    item = ready.get_nowait()
                    if isinstance(item, _End):
                        ended = True
                        break
                    batch.append(item)
                admitted = 0
                for _ in batch:
                    if not await runner.enter():
                        break
                    admitted += 1
                if admitted < len(batch) or runner.stopping:
                    for _ in range(admitted):
                        runner.leave()
                    break
                await self._start(runner, batch)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        error = None if reader.cancelled() else reader.exception()
        if error is not None:  # the source failed: the run says why
            raise error

    async def _read(self, ready: asyncio.Queue[Item | _End]) -> None:
        try:
            async for item in self.jobs:
                await ready.put(item)
        except Exception:
            await ready.put(_END)  # the feed ends, then raises the source's error
            raise
        await ready.put(_END)

    async def _start(self, runner: Runner, items: list[Item]) -> None:
        jobs = [item for item in items if isinstance(item, ShipmentJob)]
        records = {record.key: record for record in await runner.journal.add(jobs)}
        wanted: dict[str, JobRecord] = {}
        for item in items:
            if isinstance(item, InvalidJob):
                self.shipper.progress.invalid += 1
                await runner.report(ShipmentResult.invalid(item.key, item.row, item.error))
                continue
            record = records[item.key]
            if item.key in wanted or runner.handed(item.key):
                error = f"key {item.key!r} appears twice in the input; each job needs its own"
                await runner.report(ShipmentResult.invalid(item.key, None, error))
            elif record.job != item:
                error = f"key {item.key!r} is already used by a different job in the journal"
                await runner.report(ShipmentResult.invalid(item.key, None, error))
            elif record.finished and not self._retrying(record):
                self.shipper.progress.resumed += 1
                await runner.report(ShipmentResult.from_record(record, resumed=True))
            else:
                wanted[item.key] = record
        runner.want(list(wanted.values()))

    def _retrying(self, record: JobRecord) -> bool:
        shipper = self.shipper
        return shipper._retry_failed and record.state is JobState.FAILED and record.retryable


class _End:
    """The source has no more jobs."""


_END = _End()
_T = TypeVar("_T")


async def _unless_stopped(
    awaitable: Awaitable[_T], stop: asyncio.Event
) -> asyncio.Future[_T] | None:
    """``awaitable`` run to its end (the finished future), or ``None`` once ``stop`` is
    set first (then ``awaitable`` is cancelled)."""
    task = asyncio.ensure_future(awaitable)
    if not stop.is_set():
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
    if task.done():
        return task
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


async def _aiter(jobs: Iterable[Item] | AsyncIterable[Item]) -> AsyncIterator[Item]:
    if isinstance(jobs, AsyncIterable):
        async for item in jobs:
            yield item
    else:
        for item in jobs:
            yield item
