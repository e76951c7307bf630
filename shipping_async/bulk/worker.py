"""Worker: a façade of the runner that drains a journal, every account, until no job is left.

Any number of workers, on any number of hosts, run :meth:`Worker.run` against one
PostgreSQL journal (or one process against a SQLite file). Each account gets a *lane*
(its client, order limiter, pipeline and gate). The worker claims for all its lanes in
one journal call, at most twice ``max_in_flight`` jobs at once, one at a time round the
accounts, and lists the accounts with work again every poll until none has an
unfinished job left - including jobs leased by other workers, because a worker that
dies leaves its jobs to be taken over once their lease runs out. See
:mod:`shipping_async.bulk._runner`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from shipping_async.bulk._runner import DEFAULT_MAX_IN_FLIGHT, DrainableJournal, Runner
from shipping_async.bulk.choice import EstimateChooser
from shipping_async.bulk.pipeline import ShippingClient
from shipping_async.bulk.progress import RunProgress
from shipping_async.bulk.results import ShipmentResult
from shipping_async.clock import Clock, SystemClock

__all__ = ["SharedJournal", "Worker"]

#: A journal workers can drain (it lists its accounts with work); both stores are.
SharedJournal = DrainableJournal


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
    every third of it; the accounts with work are listed every tenth. ``concurrency``
    bounds the jobs claimed per account; ``max_in_flight`` the jobs doing requests at once
    across all accounts (first come, first served), sized for one core by default, and
    twice it the jobs claimed at once.
    """

    def __init__(
        self,
        journal: DrainableJournal,
        client_for: Callable[[str], ShippingClient],
        *,
        concurrency: int = 32,
        lease: float = 60.0,
        choose: EstimateChooser | None = None,
        estimate_validity: float | None = None,
        retry_failed: bool = False,
        worker_id: str | None = None,
        clock: Clock | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        self.journal = journal
        self.runner = Runner(
            journal,
            client_for,
            clock=clock or SystemClock(),
            concurrency=concurrency,
            lease=lease,
            choose=choose,
            estimate_validity=estimate_validity,
            retry_failed=retry_failed,
            worker_id=worker_id,
            max_in_flight=max_in_flight,
        )
        self.worker_id = self.runner.worker_id
        self.progress: RunProgress = self.runner.progress

    def stop(self) -> None:
        """Stop gracefully: claim nothing more, start no more orders, finish what is sent."""
        self.runner.stop()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self.runner.stopping

    @property
    def unfinished(self) -> dict[str, str]:
        """Jobs this worker let go unfinished (stopped, claimed elsewhere), by key: why."""
        return self.runner.unfinished

    def run(self) -> AsyncIterator[ShipmentResult]:
        """Work until no account has unfinished jobs; yields each job this worker finished."""
        return self.runner.drain()

    async def accounts_with_work(self) -> list[str]:
        """Accounts whose jobs are not all finished, in the journal."""
        return await self.journal.accounts_with_work(retry_failed=self.runner.retry_failed)
