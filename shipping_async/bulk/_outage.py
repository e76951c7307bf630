"""Riding out a journal store that goes away: wait, retry with backoff, say so once each way.

A worker runs for weeks; its database restarts, fails over or drops connections. The
:class:`SteadyJournal` in front of a store turns a lost connection into a pause: an
operation that is safe to repeat is tried again (with backoff, the pool reconnecting on
the way) until the store answers, and its caller simply waits. The outage is logged once
at ERROR when it starts and once when the store answers again, like the Redis order
limiter. While the store is away :attr:`SteadyJournal.up` is clear and the order gate
admits nobody: no new order starts. A request already on the wire finishes; its task
holds the answer and writes it when the store returns.

Which writes are safe to repeat, and the one that is not:

- ``add``, ``claim``, ``renew``, ``release``, ``record`` and every read: repeating them
  does what the first did (a claim whose answer was lost leaves jobs leased to nobody
  that lapse after the lease).
- ``finish``, ``withdraw_order``, ``reconcile``: the first attempt may have committed
  (dropped the token, changed the state) before the connection died, so a repeat is
  refused; the row then tells whether it was ours, and it is returned as done.
- ``begin_order`` (the intent): it is never repeated blindly. When its connection dies
  it raises :class:`IntentUnsettled` at once, before anything is sent (the order's
  permit goes back); the pipeline waits for the store, reads the row and takes the
  intent back if it committed, then queues for the order again under a live lease.

With ``max_outage`` (real seconds; ``None`` waits forever) an outage that lasts longer
raises :class:`~shipping_async.bulk.journal.JournalUnavailableError` from every waiting
operation: the run ends with what it could not write left to the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar, Unpack

from shipping_async.bulk._places import Signal
from shipping_async.bulk.jobs import ShipmentJob
from shipping_async.bulk.journal import (
    JobFields,
    JobRecord,
    JobState,
    Journal,
    JournalError,
    JournalStateError,
    JournalUnavailableError,
    LeaseLostError,
)

__all__ = ["IntentUnsettled", "SteadyJournal", "steady", "unreachable"]

_log = logging.getLogger("shipping_async.bulk.journal")

#: Calls beyond the Journal protocol that are safe to repeat, waited out like its reads
#: when the store has them: the evidence of :mod:`shipping_async.bulk.evidence` (a
#: repeated recording only counts one delivery more) and the live claims of a worker.
_REPEATABLE_EXTRAS = frozenset(
    {"record_order_received", "order_received", "evidence_now", "claimed_by"}
)

T = TypeVar("T")

#: Backoff between attempts while the store is away (real seconds): first, most. A call
#: waiting out its backoff goes on at once when the outage ends.
_FIRST_DELAY = 0.05
_MOST_DELAY = 0.5
#: The most the watcher waits between looks at a store that is away (real seconds): how
#: late a worker may notice that the store is back.
_MOST_LOOK = 0.25
#: Real seconds claims wait after an outage. Leases lapse during a long one; every worker
#: renews its own as soon as it notices the store is back (within ``_MOST_LOOK``), and
#: only then may claims take over the leases that are still lapsed: those of dead workers.
_CLAIM_GRACE = 2 * _MOST_LOOK


class IntentUnsettled(JournalError):
    """``begin_order``'s connection died: the intent may or may not have committed, and
    nothing was sent. The caller settles it once the store answers again."""


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the store cannot be reached now (worth waiting for), rather
    than that it refused something (a bug, a damaged journal, a full SQLite disk).

    The one place that maps the drivers' connection errors: a socket error or timeout;
    asyncpg's lost connection, a server shutting down or starting up (class 57), one out
    of connections or disk (class 53), or a standby that refuses writes after a failover.
    """
    if isinstance(exc, OSError | TimeoutError):
        return True
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is None:
        return False
    errors = asyncpg.exceptions
    if isinstance(
        exc,
        errors.PostgresConnectionError
        | errors.OperatorInterventionError
        | errors.InsufficientResourcesError
        | errors.ReadOnlySQLTransactionError,
    ):
        return True
    # asyncpg's "connection is closed" / "pool is closing" on a connection a crash cut.
    return isinstance(exc, errors.InterfaceError) and "clos" in str(exc)


def steady(journal: Journal, *, max_outage: float | None = None) -> SteadyJournal:
    """``journal`` behind a :class:`SteadyJournal` (itself when it already is one)."""
    if isinstance(journal, SteadyJournal):
        return journal
    return SteadyJournal(journal, max_outage=max_outage)


class SteadyJournal:
    """A :class:`~shipping_async.bulk.journal.Journal` that waits out its store's outages.

    Other attributes of the store (``counts_by_account``, ``schema``) are passed through.
    """

    def __init__(self, store: Journal, *, max_outage: float | None = None) -> None:
        if max_outage is not None and max_outage <= 0:
            raise ValueError(f"max_outage: must be > 0 seconds, got {max_outage}")
        self.store = store
        self.max_outage = max_outage
        #: Set while the store answers; cleared for the length of an outage (a
        #: :class:`~shipping_async.bulk._places.Signal`: the order gate listens to it).
        self.up = Signal()
        self.up.set()
        self._since: float | None = None  # time.monotonic() the outage started
        self._ended: float | None = None  # time.monotonic() the last outage (said) ended
        self._said = False  # the outage was logged
        self._last: BaseException | None = None

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.store, name)  # AttributeError: the store has no such thing
        if name not in _REPEATABLE_EXTRAS:
            return found

        async def waiting(*args: Any, **kwargs: Any) -> Any:
            return await self._until_answered(lambda: found(*args, **kwargs))

        return waiting

    @property
    def away(self) -> bool:
        """True while the store does not answer."""
        return self._since is not None

    # -- the outage ------------------------------------------------------------------------

    def _went(self, exc: BaseException) -> None:
        """An attempt found the store away. The first failure is not reported (a pooled
        connection the server closed fails once, and the retry at once succeeds); the
        second starts the outage: logged once. Past ``max_outage``, it gives up."""
        now = time.monotonic()  # an infrastructure duration: real seconds
        if self._since is None:
            self._since = now
            self.up.clear()
        elif not self._said:
            self._said = True
            _log.error(
                "journal store unreachable (%s); no new order starts until it answers "
                "again; answers already on the way are kept and written then",
                _describe(exc),
            )
        self._last = exc
        self._give_up_if_long()

    def _give_up_if_long(self) -> None:
        if self._since is None or self.max_outage is None:
            return
        away = time.monotonic() - self._since
        if away >= self.max_outage:
            reason = _describe(self._last) if self._last is not None else "no answer"
            raise JournalUnavailableError(
                f"the journal store was unreachable for {away:.0f} s, longer than "
                f"--max-store-outage {self.max_outage:g} ({reason})"
            )

    def _back(self, began: float) -> None:
        """A call begun at ``began`` (``time.monotonic()``) was answered. One begun before
        the outage started proves nothing (the dying server answered it): the outage, and
        the closed order gate, last until a call begun since is answered."""
        if self._since is not None and began >= self._since:
            if self._said:
                _log.warning(
                    "journal store answers again after %.1f s; work goes on",
                    time.monotonic() - self._since,
                )
            if self._said:
                self._ended = time.monotonic()
            self._since = None
            self._said = False
            self.up.set()

    async def _pause(self, delay: float) -> None:
        if self.max_outage is not None and self._since is not None:
            left = self._since + self.max_outage - time.monotonic()
            delay = min(delay, max(left, 0.0))
        # Infrastructure backoff; over at once when another call finds the store back.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.up.wait(), delay * random.uniform(0.5, 1.0))

    async def watch(self) -> None:
        """A side task for the run: while the store is away, ask it (cheaply) whether it
        is back, so that waiters parked at the order gate go on; raise
        :class:`~shipping_async.bulk.journal.JournalUnavailableError` once an outage
        outlasts ``max_outage``, which ends the run. Runs until cancelled."""
        delay = _FIRST_DELAY
        while True:
            if not self.away:
                delay = _FIRST_DELAY
                await asyncio.sleep(_MOST_DELAY / 4)  # infrastructure: a cheap look
                continue
            self._give_up_if_long()
            began = time.monotonic()
            try:
                await self.store.get("")  # no such job: one indexed look-up
            except Exception as exc:
                if not unreachable(exc):
                    raise
                self._went(exc)
                await self._pause(delay)
                delay = min(delay * 2, _MOST_LOOK)
            else:
                self._back(began)

    async def _until_answered(
        self,
        attempt: Callable[[], Awaitable[T]],
        settled: Callable[[], Awaitable[T | None]] | None = None,
    ) -> T:
        """``attempt()`` until the store answers it. After a lost connection, a refusal
        (:class:`JournalStateError`, incl. a lost lease) asks ``settled()`` whether the
        lost attempt had committed; its answer stands, ``None`` lets the refusal through."""
        began = time.monotonic()
        try:
            result = await attempt()
        except Exception as exc:
            failure = exc
        else:
            if self._since is not None:
                self._back(began)
            return result
        return await self._failed(failure, began, attempt, settled)

    async def _failed(
        self,
        exc: Exception,
        began: float,
        attempt: Callable[[], Awaitable[T]],
        settled: Callable[[], Awaitable[T | None]] | None = None,
    ) -> T:
        """What :meth:`_until_answered` does once ``attempt()``, begun at ``began``, raised
        ``exc``: the happy path stays one ``try`` in the caller (the hot calls inline it);
        a failure comes here (out of the caller's ``except``), where the attempts go on
        until the store answers."""
        delay = 0.0  # the first retry at once: a pooled connection may just have been cut
        lost = False
        while True:
            if isinstance(exc, JournalStateError | LeaseLostError):
                self._back(began)
                if lost and settled is not None:
                    done = await self._until_answered(settled)
                    if done is not None:
                        return done
                raise exc
            if not unreachable(exc):
                raise exc
            self._went(exc)
            lost = True
            await self._pause(delay)
            delay = min(max(delay * 2, _FIRST_DELAY), _MOST_DELAY)
            began = time.monotonic()
            try:
                result = await attempt()
            except Exception as again:
                exc = again
                continue
            self._back(began)
            return result

    async def _row(self, key: str) -> JobRecord | None:
        return await self.store.get(key)

    # -- the Journal protocol --------------------------------------------------------------

    async def add(self, jobs: Sequence[ShipmentJob]) -> list[JobRecord]:
        return await self._until_answered(lambda: self.store.add(jobs))

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
        # A claim whose connection died may have committed: its jobs are then leased to
        # this worker under tokens it never heard of, and would wait out their lease.
        # After a lost attempt they are read back (``claimed_by``) and adopted.
        lost = False
        adopted: list[JobRecord] = []

        async def attempt() -> list[JobRecord]:
            nonlocal lost, adopted
            await self._claims_may_go()
            if lost:
                adopted = await self._claimed_by(
                    worker_id, limit=limit, keys=keys, account=account, exclude=exclude
                )
                if accounts is not None:  # only the accounts asked for, within their shares
                    adopted = _within(adopted, accounts)
            lost = True  # until this attempt is answered
            fresh: list[JobRecord] = []
            if limit > len(adopted):
                fresh = await self.store.claim(
                    worker_id,
                    lease=lease,
                    limit=limit - len(adopted),
                    keys=keys,
                    account=account,
                    retry_failed=retry_failed,
                    exclude=[*exclude, *(record.key for record in adopted)],
                    accounts=None if accounts is None else _left(accounts, adopted),
                )
            lost = False
            return [*adopted, *fresh]

        claimed = await self._until_answered(attempt)
        if adopted:
            _log.info(
                "took back %d job(s) a claim had leased as its connection was lost: %s",
                len(adopted),
                ", ".join(record.key for record in adopted[:5]),
            )
        return claimed

    async def _claims_may_go(self) -> None:
        """Before a claim: while the store is away, wait for it (a look, not a claim); for
        :data:`_CLAIM_GRACE` after an outage, wait, so that the workers whose leases
        lapsed during it renew them before anyone's claim takes their jobs over."""
        if self.away:
            await self._until_answered(lambda: self.store.get(""))
        if self._ended is not None:
            left = self._ended + _CLAIM_GRACE - time.monotonic()
            if left > 0:
                await asyncio.sleep(left)  # infrastructure: real seconds

    async def _claimed_by(
        self,
        worker_id: str,
        *,
        limit: int,
        keys: Sequence[str] | None,
        account: str | None,
        exclude: Collection[str],
    ) -> list[JobRecord]:
        """The store's live claims of ``worker_id`` outside ``exclude`` (none when the
        store cannot list them)."""
        claimed_by: Callable[..., Awaitable[list[JobRecord]]] | None
        claimed_by = getattr(self.store, "claimed_by", None)
        if claimed_by is None:
            return []
        found: list[JobRecord] = await claimed_by(
            worker_id, limit=limit, keys=keys, account=account, exclude=exclude
        )
        return found

    # The calls every job makes inline _until_answered's first attempt: one coroutine and
    # no closure per call while the store answers (the closure is made on a failure).

    async def renew(self, claims: Mapping[str, str], *, lease: float) -> set[str]:
        began = time.monotonic()
        try:
            held = await self.store.renew(claims, lease=lease)
        except Exception as exc:
            failure = exc
        else:
            if self._since is not None:
                self._back(began)
            return held
        return await self._failed(failure, began, lambda: self.store.renew(claims, lease=lease))

    async def record(
        self, token: str, key: str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        began = time.monotonic()
        try:
            record = await self.store.record(token, key, state, **fields)
        except Exception as exc:
            failure = exc
        else:
            if self._since is not None:
                self._back(began)
            return record
        return await self._failed(
            failure, began, lambda: self.store.record(token, key, state, **fields)
        )

    async def begin_order(
        self,
        token: str,
        key: str,
        *,
        quote_id: int,
        estimate_id: int,
        quote: JobFields | None = None,
    ) -> JobRecord:
        if self.away:  # the gate admitted this job just before the store went
            raise IntentUnsettled(f"job {key!r}: the journal store is away; nothing was sent")
        began = time.monotonic()
        try:
            record = await self.store.begin_order(
                token, key, quote_id=quote_id, estimate_id=estimate_id, quote=quote
            )
        except Exception as exc:
            if not unreachable(exc):
                raise
            self._went(exc)
            raise IntentUnsettled(
                f"job {key!r}: the connection was lost while writing the order intent; "
                "nothing was sent"
            ) from None
        self._back(began)
        return record

    def sending(self, key: str) -> None:
        self.store.sending(key)

    async def withdraw_order(self, token: str, key: str) -> JobRecord:
        async def settled() -> JobRecord | None:
            row = await self._row(key)
            ours = row is not None and row.claim_token == token
            return row if ours and row is not None and row.state is JobState.QUOTED else None

        return await self._until_answered(lambda: self.store.withdraw_order(token, key), settled)

    async def finish(
        self, token: str, key: str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        began = time.monotonic()
        try:
            record = await self.store.finish(token, key, state, **fields)
        except Exception as exc:
            failure = exc
        else:
            if self._since is not None:
                self._back(began)
            return record

        async def settled() -> JobRecord | None:
            # The lost attempt committed: the state is ours and nobody holds the job.
            row = await self._row(key)
            if row is None or row.state is not state or row.claim_token is not None:
                return None
            return row

        return await self._failed(
            failure, began, lambda: self.store.finish(token, key, state, **fields), settled
        )

    async def release(self, claims: Mapping[str, str]) -> None:
        await self._until_answered(lambda: self.store.release(claims))

    async def reconcile(
        self, key: str, *, order_id: int | None, evidence: str | None = None
    ) -> JobRecord:
        async def settled() -> JobRecord | None:
            row = await self._row(key)
            wanted = JobState.ORDERED if order_id is not None else JobState.PENDING
            if row is None or row.state is not wanted or row.order_id != order_id:
                return None
            return row

        return await self._until_answered(
            lambda: self.store.reconcile(key, order_id=order_id, evidence=evidence), settled
        )

    async def get(self, key: str) -> JobRecord | None:
        began = time.monotonic()
        try:
            record = await self.store.get(key)
        except Exception as exc:
            failure = exc
        else:
            if self._since is not None:
                self._back(began)
            return record
        return await self._failed(failure, began, lambda: self.store.get(key))

    async def records(
        self, *, states: Collection[JobState] | None = None
    ) -> AsyncIterator[JobRecord]:
        """The store's records; a listing cut by a lost connection goes on where it was
        (each record once) when the store answers again."""
        seen: set[str] = set()  # keys yielded, when a filter lets rows move in and out
        yielded = 0  # unfiltered, the listing's order (by insertion) is stable
        delay = 0.0
        while True:
            skip = yielded if states is None else 0
            began = time.monotonic()
            try:
                async for record in self.store.records(states=states):
                    if skip:
                        skip -= 1
                        continue
                    if states is not None:
                        if record.key in seen:
                            continue
                        seen.add(record.key)
                    yielded += 1
                    yield record
            except Exception as exc:
                if not unreachable(exc):
                    raise
                self._went(exc)
                await self._pause(delay)
                delay = min(max(delay * 2, _FIRST_DELAY), _MOST_DELAY)
                continue
            self._back(began)
            return

    async def order_intent_ages(self, *, within: float, account: str | None = None) -> list[float]:
        return await self._until_answered(
            lambda: self.store.order_intent_ages(within=within, account=account)
        )

    async def needs_reconciliation(self) -> list[JobRecord]:
        return await self._until_answered(self.store.needs_reconciliation)

    async def counts(self) -> dict[JobState, int]:
        return await self._until_answered(self.store.counts)

    async def accounts_with_work(self, *, retry_failed: bool = False) -> list[str]:
        listing: Callable[..., Awaitable[list[str]]] = self.store.accounts_with_work  # type: ignore[attr-defined]
        return await self._until_answered(lambda: listing(retry_failed=retry_failed))

    async def counts_by_account(self) -> dict[str, dict[JobState, int]]:
        by_account: Callable[[], Awaitable[dict[str, dict[JobState, int]]]] | None
        by_account = getattr(self.store, "counts_by_account", None)
        if by_account is None:  # a store that cannot tell accounts apart (SQLite)
            return {"*": await self.counts()}
        return await self._until_answered(by_account)

    async def close(self) -> None:
        await self.store.close()


def _within(records: list[JobRecord], shares: Mapping[str, int]) -> list[JobRecord]:
    """``records`` of the accounts in ``shares``, at most each account's share."""
    taken: dict[str, int] = {}
    kept: list[JobRecord] = []
    for record in records:
        if taken.get(record.account, 0) < shares.get(record.account, 0):
            taken[record.account] = taken.get(record.account, 0) + 1
            kept.append(record)
    return kept


def _left(shares: Mapping[str, int], taken: list[JobRecord]) -> dict[str, int]:
    """``shares`` less the jobs of ``taken`` (accounts whose share is used up dropped)."""
    left = dict(shares)
    for record in taken:
        left[record.account] = left.get(record.account, 0) - 1
    return {name: share for name, share in left.items() if share > 0}


def _describe(exc: BaseException) -> str:
    text = str(exc)[:200] or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
