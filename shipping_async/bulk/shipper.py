"""BulkShipper: a façade that feeds an iterable or async iterable of jobs into the runner.

The jobs are added to the journal a chunk at a time as they are read (at most
``concurrency`` unsettled), then claimed and shipped by :class:`~shipping_async.bulk._runner.Runner`
on one lane with the client's limiter. Jobs the journal already holds go on from their
state; finished ones are reported as resumed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from pathlib import Path

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
    """Reads the jobs, adds them to the journal a chunk at a time, hands them over."""

    def __init__(self, shipper: BulkShipper, jobs: AsyncIterator[Item]) -> None:
        self.shipper = shipper
        self.jobs = jobs
        self.chunk = max(1, min(32, shipper._concurrency))

    async def into(self, runner: Runner) -> None:
        shipper = self.shipper
        buffer: list[Item] = []
        async for item in self.jobs:
            await runner.enter()
            if shipper.stopping:
                runner.leave()
                break
            buffer.append(item)
            if len(buffer) >= self.chunk or runner.full:
                await self._start(runner, buffer)
                buffer = []
            if shipper.stopping:
                break
        if buffer and not shipper.stopping:
            await self._start(runner, buffer)
        else:
            for _ in buffer:
                runner.leave()

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


async def _aiter(jobs: Iterable[Item] | AsyncIterable[Item]) -> AsyncIterator[Item]:
    if isinstance(jobs, AsyncIterable):
        async for item in jobs:
            yield item
    else:
        for item in jobs:
            yield item
