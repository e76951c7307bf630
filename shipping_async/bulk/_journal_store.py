"""What every journal store shares: the move rules, the refusals, and the job encoding."""

from __future__ import annotations

import itertools
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any, Self, TypeVar, Unpack

import msgspec

from shipping_async.bulk.jobs import ShipmentJob
from shipping_async.bulk.journal import (
    FINISHED_STATES,
    JobFields,
    JobRecord,
    JobState,
    JournalDataError,
    JournalStateError,
    LeaseLostError,
)

T = TypeVar("T")

#: The names of :class:`JobFields`; each store keeps each of them.
JOB_FIELDS = frozenset(JobFields.__annotations__)
#: What a job's error becomes when it starts again (a claimed retry, a reconciled job).
NO_ERROR: JobFields = {"error": None, "error_stage": None, "retryable": False}
DIED_MID_ORDER = (
    "the worker stopped after recording the order intent and before recording the "
    "answer: the order may exist; reconcile before sending it again"
)
JOB_ENCODER = msgspec.json.Encoder()
JOB_DECODER = msgspec.json.Decoder(ShipmentJob)


def read_column(key: str, column: str, decode: Callable[[Any], T], raw: Any) -> T:
    """``decode(raw)`` of one stored column, or a ``JournalError`` naming the job and column.

    A journal file is input like any other: damaged, or written by another program, it
    must stop the run with a sentence, not a traceback from deep inside a decoder.
    """
    try:
        return decode(raw)
    except (msgspec.MsgspecError, ValueError, TypeError, RecursionError) as exc:
        reason = str(exc)[:200]
        raise JournalDataError(
            f"the journal's job {key!r}: column {column}: {reason} (the journal is damaged "
            "or was written by another program)"
        ) from None


def check_fields(fields: Mapping[str, Any]) -> None:
    """Refuse names that are not :class:`JobFields` (a typo must not vanish silently)."""
    if not JOB_FIELDS.issuperset(fields):
        unknown = set(fields) - JOB_FIELDS
        raise TypeError(f"not job fields: {', '.join(sorted(unknown))}")


def reconciled_state(order_id: int | None) -> JobState:
    """Where :meth:`~shipping_async.bulk.journal.Journal.reconcile` sends an UNKNOWN job."""
    return JobState.ORDERED if order_id is not None else JobState.PENDING


def no_such_job(key: str) -> JournalStateError:
    return JournalStateError(f"no job with key {key!r} in the journal")


def not_unknown(key: str, state: JobState) -> JournalStateError:
    return JournalStateError(f"job {key!r} is {state.value}, not unknown: nothing to reconcile")


def new_token() -> str:
    """A claim token: new for every claim, never reused.

    A random prefix per process (drawn again in a forked child) and a counter: unique
    without a system call for random bytes per claim (a uuid4 each was ~1.5 us).
    """
    return f"{_token_prefix}{next(_token_count):016x}"


def _new_token_source() -> None:
    global _token_prefix, _token_count
    _token_prefix = uuid.uuid4().hex[:16]
    _token_count = itertools.count()


_token_prefix = ""
_token_count = itertools.count()
_new_token_source()
os.register_at_fork(after_in_child=_new_token_source)


def lease_lost(key: str) -> LeaseLostError:
    return LeaseLostError(
        f"job {key!r}: this claim is stale (the lease lapsed and the job was claimed again, "
        "or it was settled); the write was refused"
    )


def lease_lapsed(key: str) -> LeaseLostError:
    return LeaseLostError(f"job {key!r}: the lease has lapsed; renew it before ordering")


def wrong_state(
    key: str, current: JobState, state: JobState, require: Collection[JobState]
) -> JournalStateError:
    needs = " or ".join(sorted(wanted.value for wanted in require))
    return JournalStateError(f"job {key!r} is {current.value}; {state.value} needs {needs}")


#: Where an order intent may start: a job quoted just now (the quote recorded with the
#: intent) or quoted earlier; and where its withdrawal must find the job.
BEFORE_THE_ORDER: tuple[JobState, ...] = (JobState.PENDING, JobState.QUOTED)
IN_THE_ORDER: tuple[JobState, ...] = (JobState.ORDERING,)


class JournalStore(ABC):
    """The protocol methods that are the same rules in every store, on one ``_update``.

    A store implements ``_update`` (one leased write, atomic with its checks) and the
    rest of :class:`~shipping_async.bulk.journal.Journal`.
    """

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def record(
        self, token: str, key: str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        if state is JobState.ORDERING or state in FINISHED_STATES:
            raise JournalStateError(f"{state.value}: use begin_order() or finish() for it")
        check_fields(fields)
        return await self._update(token, key, state, fields, keep_lease=True)

    async def begin_order(
        self,
        token: str,
        key: str,
        *,
        quote_id: int,
        estimate_id: int,
        quote: JobFields | None = None,
    ) -> JobRecord:
        fields: JobFields = {"quote_id": quote_id, "estimate_id": estimate_id}
        if quote:
            check_fields(quote)
            fields = {**quote, **fields}
        return await self._update(
            token, key, JobState.ORDERING, fields, keep_lease=True, require=BEFORE_THE_ORDER
        )

    def sending(self, key: str) -> None:
        """Nothing to note: a store without sent marks (see the protocol)."""
        return None

    async def withdraw_order(self, token: str, key: str) -> JobRecord:
        return await self._update(
            token, key, JobState.QUOTED, {}, keep_lease=True, require=IN_THE_ORDER
        )

    async def finish(
        self, token: str, key: str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        if state not in FINISHED_STATES:
            raise JournalStateError(f"{state.value} is not a terminal state")
        check_fields(fields)
        return await self._update(token, key, state, fields, keep_lease=False)

    async def needs_reconciliation(self) -> list[JobRecord]:
        return [record async for record in self.records(states=[JobState.UNKNOWN])]

    @abstractmethod
    def records(self, *, states: Collection[JobState] | None = None) -> AsyncIterator[JobRecord]:
        """Every record (in ``states`` if given), in the order jobs were added."""

    @abstractmethod
    async def close(self) -> None:
        """Release the store."""

    @abstractmethod
    async def _update(
        self,
        token: str,
        key: str,
        state: JobState,
        fields: JobFields,
        *,
        keep_lease: bool,
        require: Collection[JobState] | None = None,
    ) -> JobRecord:
        """Move ``key`` to ``state`` with ``fields``, atomically with its checks.

        Only while ``token`` is the job's claim token (:func:`lease_lost`); into
        ``ORDERING`` only with the lease live as well (:func:`lease_lapsed`); if
        ``require`` is given, only from one of those states (:func:`wrong_state`). The lease (and
        token) is kept or dropped. The token is checked first: a stale task learns that
        its claim is gone, never a misleading state error.
        """
