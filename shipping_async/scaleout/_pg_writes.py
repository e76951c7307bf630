"""The PostgreSQL journal's leased writes: many jobs' moves in one statement, group-committed.

Every state change of a job is one fenced ``UPDATE`` (see
:mod:`shipping_async.scaleout.postgres_journal`). :func:`update_sql` writes any number of
them as one statement over ``jsonb_to_recordset``: each row names its job, its claim
token, the state it moves to, the state it must be in (if any), whether it keeps the
lease, and which facts it sets. One statement is one transaction, committed before any
of its callers returns.

:class:`GroupCommit` gathers the writes that arrive while the previous statement is on
its way (and those of one loop tick) and sends them together: under load, many jobs'
writes share one round trip and one commit, and nobody waits longer than one statement
for it. The order intent is not gathered: it is written alone, just before its send (and
so is its withdrawal).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Generic, TypeVar

import msgspec

from shipping_async.bulk.journal import JobFields, JobState

__all__ = ["GroupCommit", "update_sql", "write_item"]

T = TypeVar("T")
R = TypeVar("R")

#: Each fact a write may set, with its column's type.
_FACT_TYPES = {
    "quote_id": "bigint",
    "estimate_id": "bigint",
    "carrier": "text",
    "service": "text",
    "cost": "numeric",
    "currency": "text",
    "hub": "boolean",
    "order_id": "bigint",
    "waybills": "text[]",
    "pickup_confirmation": "text",
    "pickup_date": "date",
    "pickup_from": "time",
    "pickup_to": "time",
    "error": "text",
    "error_stage": "text",
    "retryable": "boolean",
    "evidence": "text",
}
_ENCODER = msgspec.json.Encoder()


def update_sql(jobs: str) -> str:
    """The statement of many writes: ``$1`` is the JSON array of :func:`write_item` rows.

    Each row changes its job only under its claim token (``live``: and with the lease
    running, for the order intent; ``require``: and from one of those states). It returns the key,
    the token and the stamps the store set; the rest of the record the caller knows.
    """
    facts = ", ".join(
        f"{name} = CASE WHEN c.sets ? '{name}' THEN c.{name} ELSE j.{name} END"
        for name in _FACT_TYPES
    )
    lease = ", ".join(
        f"{name} = CASE WHEN c.keep THEN j.{name} END"
        for name in ("lease_owner", "lease_until", "claim_token")
    )
    columns = ", ".join(f"{name} {kind}" for name, kind in _FACT_TYPES.items())
    return (
        f"UPDATE {jobs} AS j SET state = c.state, updated_at = now(), {facts}, {lease}, "
        "order_intent_at = CASE WHEN c.state = 'ordering' THEN now() "
        "ELSE j.order_intent_at END "
        "FROM jsonb_to_recordset($1::jsonb) AS c(key text, token text, state text, "
        f"require text[], keep boolean, live boolean, sets jsonb, {columns}) "
        "WHERE j.key = c.key AND j.claim_token = c.token "
        "AND (c.require IS NULL OR j.state = ANY(c.require)) "
        "AND (NOT c.live OR j.lease_until > now()) "
        "RETURNING j.key, c.token, j.updated_at, j.order_intent_at"
    )


def write_item(
    token: str,
    key: str,
    state: JobState,
    fields: JobFields,
    *,
    keep_lease: bool,
    require: Collection[JobState] | None,
) -> dict[str, Any]:
    """One row of :func:`update_sql`'s ``$1``."""
    return {
        "key": key,
        "token": token,
        "state": state.value,
        "require": None if require is None else [wanted.value for wanted in require],
        "keep": keep_lease,
        "live": state is JobState.ORDERING,
        "sets": list(fields),
        **fields,
    }


def encode_items(items: list[dict[str, Any]]) -> str:
    """``items`` as the JSON text of ``$1`` (decimals, dates and times as strings)."""
    return _ENCODER.encode(items).decode()


class GroupCommit(Generic[T, R]):
    """Sends the items submitted meanwhile as one batch; each caller gets its own result.

    ``write_many(items)`` returns one result per item, in order; when it raises, every
    caller of that batch gets the exception. At most one batch is on its way at a time.
    """

    __slots__ = ("_flusher", "_queue", "_write_many")

    def __init__(self, write_many: Callable[[list[T]], Awaitable[list[R]]]) -> None:
        self._write_many = write_many
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # the other writes of this loop tick
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                results = await self._write_many([item for item, _ in batch])
            except asyncio.CancelledError:
                for _, future in batch:
                    future.cancel()
                raise
            except BaseException as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def close(self) -> None:
        """Wait for the batch on its way (and those queued behind it)."""
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
