"""The SQLite journal's one connection: group commits, commits at once, and reads.

The connection is used by one caller at a time (:attr:`SQLiteWriter.lock`): a batch of
queued writes, a write committed at once, or a read. A batch's statements run on the
event loop's thread and its commit (the fsync) on the writer thread; a write committed
at once (an order intent's withdrawal) commits on the loop's thread, taking the writes
queued meanwhile into its transaction; a read runs on the writer thread. See
:mod:`shipping_async.bulk.sqlite_journal` for why.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from shipping_async.bulk._sqlite_rows import Write, commit, commit_one, run_batch
from shipping_async.bulk.journal import JournalError

__all__ = ["SQLiteWriter"]

T = TypeVar("T")


class SQLiteWriter:
    """Commits and reads on ``db``; ``forget`` is called when a commit failed (what the
    journal keeps in memory may then be ahead of the file)."""

    def __init__(
        self, db: sqlite3.Connection, executor: ThreadPoolExecutor, forget: Callable[[], None]
    ) -> None:
        self.db = db
        self._executor = executor
        self._forget = forget
        #: Held by whoever uses the connection: a batch, a read, or an order intent.
        self.lock = asyncio.Lock()
        self._pending: list[Write] = []
        self._flusher: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its writes run on
        self.closed = False

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn``'s value, run on the writer thread once the connection is free."""
        self._check_open()
        async with self.lock:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, self.db)

    async def write(self, fn: Callable[[sqlite3.Connection], T], *, atomic: bool = False) -> T:
        """Queue ``fn`` for the next group commit; its value once committed.

        ``atomic``: ``fn`` changes nothing when it raises (it needs no savepoint). Once
        queued, a write is committed even if its caller is cancelled (then nobody hears
        how it went), so that the caller's view ("maybe written") matches the store's.
        """
        self._check_open()
        loop = self._loop
        if loop is None:  # (each asyncio.get_running_loop() is a getpid() system call)
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._pending.append((fn, future, atomic))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await future

    async def write_now(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Commit the atomic write ``fn`` on the loop's thread once the connection is free.

        For an order intent's withdrawal after a 429 or a refusal: committed before
        anything else runs (no other task, no wake-up from the writer thread, which a
        loaded machine can delay by tens of milliseconds), so that a crash right after
        the answer finds the job quoted. The writes queued meanwhile ride in the same
        transaction: one fsync serves them all.
        """
        self._check_open()
        async with self.lock:
            self._check_open()
            # No await from here on; a cancellation lands before the commit or not at all.
            riders, self._pending = self._pending, []
            try:
                outcomes = commit_one(self.db, fn, riders)
            except sqlite3.Error as exc:
                failure = self._unwritable(exc)
                _answer(riders, None, failure)
                raise failure from None
            except BaseException as exc:
                self._forget()
                _answer(riders, None, JournalError(f"the write was interrupted: {exc!r}"))
                raise
            ok, value = outcomes.pop()
            _answer(riders, outcomes, None)
            if not ok:
                raise value
            return cast(T, value)

    async def close(self) -> None:
        """Commit what is queued, then close the connection and the writer thread."""
        if self.closed:
            return
        self.closed = True
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        loop = asyncio.get_running_loop()
        async with self.lock:
            await loop.run_in_executor(self._executor, self.db.close)
        self._executor.shutdown(wait=True)

    def _check_open(self) -> None:
        if self.closed:
            raise JournalError("the journal is closed")

    async def _flush(self) -> None:
        """Commit what is queued, a batch at a time: the statements run on the loop's
        thread (no thread switch per write), the commit and its fsync on the writer's."""
        loop = asyncio.get_running_loop()
        while self._pending:
            async with self.lock:
                batch, self._pending = self._pending, []  # an intent may have taken them
                if not batch:
                    continue
                try:
                    outcomes = run_batch(self.db, batch)
                    await loop.run_in_executor(self._executor, commit, self.db)
                except asyncio.CancelledError:
                    self._forget()
                    raise
                except Exception as exc:  # the commit itself failed: nobody's write stands
                    # (The file cannot be written: disk full, read-only, locked.) Each writer
                    # hears it; writes queued meanwhile get their own attempt, so none waits
                    # forever, and close() does not raise it again.
                    _answer(batch, None, self._unwritable(exc))
                    continue
            _answer(batch, outcomes, None)

    def _unwritable(self, exc: BaseException) -> JournalError:
        self._forget()
        return JournalError(
            f"the journal file cannot be written ({exc}): make room or fix its "
            "permissions, then resume"
        )


def _answer(
    batch: Sequence[Write],
    outcomes: Sequence[tuple[bool, Any]] | None,
    failure: BaseException | None,
) -> None:
    """Tell each caller of ``batch`` its outcome, or ``failure`` for them all."""
    for index, (_, future, _) in enumerate(batch):
        if future is None or future.done():  # its caller was cancelled: nobody hears
            continue
        if outcomes is None:
            assert failure is not None
            future.set_exception(failure)
            continue
        ok, value = outcomes[index]
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
